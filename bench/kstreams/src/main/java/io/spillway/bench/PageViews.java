package io.spillway.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The B1 workload of bench/workload.py in Kafka Streams: JSON events → page and section of
 * the URL → re-key by page (a repartition topic) → running count per page (RocksDB store +
 * changelog) → {"page","section","views"} as compact JSON, keyed by page, one update per
 * input record (the record cache is off, as the other engines emit every update).
 *
 * <p>Protocol of bench/peers.py: prints {@code READY <unix time>} when the instance is
 * RUNNING, {@code DONE <unix time>} once {@code --records} records were counted and a commit
 * (an EOS v2 transaction: output, changelog and input offsets) completed after that, then
 * waits for its stdin to close and shuts down.
 *
 * <p>Arguments: bootstrap input output records commitIntervalMs stateDir applicationId
 * [standbyReplicas].
 */
public final class PageViews {
  private static final ObjectMapper JSON = new ObjectMapper();

  private PageViews() {}

  /** The running count of one page (the aggregate kept in the store). */
  record Count(String section, long views) {}

  /** section (UTF-8, length-prefixed) and views, the store's value format. */
  static final class CountSerde implements Serde<Count> {
    @Override
    public Serializer<Count> serializer() {
      return (topic, c) -> {
        byte[] s = c.section().getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(4 + s.length + 8).putInt(s.length).put(s).putLong(c.views()).array();
      };
    }

    @Override
    public Deserializer<Count> deserializer() {
      return (topic, data) -> {
        if (data == null) {
          return null;
        }
        ByteBuffer b = ByteBuffer.wrap(data);
        byte[] s = new byte[b.getInt()];
        b.get(s);
        return new Count(new String(s, StandardCharsets.UTF_8), b.getLong());
      };
    }
  }

  /** {page, section} of an event, as workload.parse: path without query, /section/page. */
  static KeyValue<String, String> parse(byte[] value) {
    JsonNode event;
    try {
      event = JSON.readTree(value);
    } catch (IOException e) {
      throw new IllegalArgumentException("input record is not JSON: " + e.getMessage(), e);
    }
    String url = event.get("url").asText();
    String path = url.split("://", 2)[1].split("\\?", 2)[0];
    String[] parts = path.split("/", 3);
    return KeyValue.pair("/" + parts[1] + "/" + parts[2], parts[1]);
  }

  static byte[] render(String page, Count c) {
    ObjectNode out = JSON.createObjectNode();
    out.put("page", page);
    out.put("section", c.section());
    out.put("views", c.views());
    try {
      return JSON.writeValueAsBytes(out);
    } catch (IOException e) {
      throw new IllegalStateException("cannot render " + page, e);
    }
  }

  private static void say(String word) {
    System.out.printf(Locale.ROOT, "%s %.6f%n", word, System.currentTimeMillis() / 1000.0);
    System.out.flush();
  }

  private static double commits(KafkaStreams streams) {
    double total = 0;
    for (var e : streams.metrics().entrySet()) {
      MetricName n = e.getKey();
      if (n.group().equals("stream-thread-metrics") && n.name().equals("commit-total")) {
        Metric m = e.getValue();
        total += ((Number) m.metricValue()).doubleValue();
      }
    }
    return total;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 7) {
      System.err.println(
          "usage: PageViews bootstrap input output records commitIntervalMs stateDir appId [standbys]");
      System.exit(2);
    }
    String bootstrap = args[0], input = args[1], output = args[2];
    long records = Long.parseLong(args[3]);
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[6]);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[4]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0); // every update goes out
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, args.length > 7 ? args[7] : "0");
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");

    AtomicLong counted = new AtomicLong();
    StreamsBuilder b = new StreamsBuilder();
    b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .map((k, v) -> parse(v))
        .groupByKey(Grouped.with("by-page", Serdes.String(), Serdes.String()))
        .aggregate(
            () -> new Count("", 0),
            (page, section, acc) -> {
              counted.incrementAndGet();
              return new Count(section, acc.views() + 1);
            },
            Materialized.<String, Count, KeyValueStore<Bytes, byte[]>>as("counts")
                .withKeySerde(Serdes.String())
                .withValueSerde(new CountSerde()))
        .toStream()
        .mapValues(PageViews::render)
        .to(output, Produced.with(Serdes.String(), Serdes.ByteArray()));

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch running = new CountDownLatch(1);
    CountDownLatch failed = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING) {
            running.countDown();
          } else if (now == KafkaStreams.State.ERROR) {
            failed.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        e -> {
          e.printStackTrace();
          return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
              .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    streams.start();
    while (!running.await(50, TimeUnit.MILLISECONDS)) {
      if (failed.getCount() == 0) {
        System.exit(1);
      }
    }
    say("READY");
    if (records > 0) {
      // DONE: all records counted, then one more commit completed (the stream thread
      // counts and commits, so that commit holds every record's output and offsets).
      while (counted.get() < records) {
        if (failed.getCount() == 0) {
          System.exit(1);
        }
        Thread.sleep(5);
      }
      double before = commits(streams);
      while (commits(streams) <= before) {
        if (failed.getCount() == 0) {
          System.exit(1);
        }
        Thread.sleep(5);
      }
      say("DONE");
    }
    InputStream in = System.in;
    while (in.read() >= 0) {
      // the benchmark closes our stdin once it has sampled us
    }
    streams.close();
    System.exit(failed.getCount() == 0 ? 1 : 0);
  }
}
