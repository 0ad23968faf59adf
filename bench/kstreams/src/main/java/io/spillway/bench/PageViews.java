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

  /**
   * The running count of one page (the aggregate kept in the store); traced (B3): also seq
   * and ts of the last record counted, which ride along to the output.
   */
  record Count(String section, long views, long seq, long ts) {}

  /** section (UTF-8, length-prefixed) and views [+ seq, ts when traced], the store's format. */
  static final class CountSerde implements Serde<Count> {
    private final boolean traced;

    CountSerde(boolean traced) {
      this.traced = traced;
    }

    @Override
    public Serializer<Count> serializer() {
      return (topic, c) -> {
        byte[] s = c.section().getBytes(StandardCharsets.UTF_8);
        ByteBuffer b = ByteBuffer.allocate(4 + s.length + (traced ? 24 : 8));
        b.putInt(s.length).put(s).putLong(c.views());
        if (traced) {
          b.putLong(c.seq()).putLong(c.ts());
        }
        return b.array();
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
        String section = new String(s, StandardCharsets.UTF_8);
        long views = b.getLong();
        return traced
            ? new Count(section, views, b.getLong(), b.getLong())
            : new Count(section, views, 0, 0);
      };
    }
  }

  /** {page, section[\tseq\tts]} of an event, as workload.parse: /section/page of the URL. */
  static KeyValue<String, String> parse(byte[] value, boolean traced) {
    JsonNode event;
    try {
      event = JSON.readTree(value);
    } catch (IOException e) {
      throw new IllegalArgumentException("input record is not JSON: " + e.getMessage(), e);
    }
    String url = event.get("url").asText();
    String path = url.split("://", 2)[1].split("\\?", 2)[0];
    String[] parts = path.split("/", 3);
    String view = parts[1];
    if (traced) {
      view += "\t" + event.get("seq").asLong() + "\t" + event.get("ts").asLong();
    }
    return KeyValue.pair("/" + parts[1] + "/" + parts[2], view);
  }

  static byte[] render(String page, Count c, boolean traced) {
    ObjectNode out = JSON.createObjectNode();
    out.put("page", page);
    out.put("section", c.section());
    out.put("views", c.views());
    if (traced) {
      out.put("seq", c.seq());
      out.put("ts", c.ts());
    }
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
          "usage: PageViews bootstrap input output records commitIntervalMs stateDir appId"
              + " [standbys [traced]]");
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
    boolean traced = args.length > 8 && args[8].equals("traced");
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix("auto.offset.reset"), "earliest");
    // B3 kills an instance: the broker's lowest session time-out (group.min.session.timeout.ms)
    // lets the survivor take its tasks over in seconds, not Kafka's default 45 s.
    p.put(StreamsConfig.consumerPrefix("session.timeout.ms"), 6000);
    p.put(StreamsConfig.consumerPrefix("heartbeat.interval.ms"), 1500);

    AtomicLong counted = new AtomicLong();
    StreamsBuilder b = new StreamsBuilder();
    b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .map((k, v) -> parse(v, traced))
        .groupByKey(Grouped.with("by-page", Serdes.String(), Serdes.String()))
        .aggregate(
            () -> new Count("", 0, 0, 0),
            (page, view, acc) -> {
              counted.incrementAndGet();
              if (!traced) {
                return new Count(view, acc.views() + 1, 0, 0);
              }
              String[] f = view.split("\t", 3);
              return new Count(f[0], acc.views() + 1, Long.parseLong(f[1]), Long.parseLong(f[2]));
            },
            Materialized.<String, Count, KeyValueStore<Bytes, byte[]>>as("counts")
                .withKeySerde(Serdes.String())
                .withValueSerde(new CountSerde(traced)))
        .toStream()
        .mapValues((page, c) -> render(page, c, traced))
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
