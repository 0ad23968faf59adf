"""Pipeline API, runtime on Spark and the spillway CLI."""
