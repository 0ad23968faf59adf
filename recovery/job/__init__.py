"""What a job is, as the runtime executes it: the compiled plan, the record of what was
submitted (the plan document), loading a pipeline from ``MODULE:ATTRIBUTE``, submit-time
configuration, record origins and the checks of a changed topology or schema.

Pure data and checks. May import :mod:`spillway.offsets` and :mod:`spillway.channels`;
nothing else of :mod:`spillway.recovery`.
"""
