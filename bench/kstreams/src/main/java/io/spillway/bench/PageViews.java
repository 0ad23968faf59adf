package io.spillway.bench;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The B1 workload of bench/workload.py in Kafka Streams, written and configured as a Kafka
 * Streams expert would: JSON events → page and section of the URL → re-key by page (a
 * repartition topic) → running count per page in a Processor API processor over a cached
 * RocksDB store (+ changelog) → {"page","section","views"} as compact JSON, keyed by page.
 *
 * <p>One output per input record, as every engine of the suite: the processor forwards each
 * update itself, so the record cache only coalesces the store's writes (RocksDB and changelog
 * get each changed key once per commit, as Spillway's state does), it never drops an update.
 *
 * <p>Protocol of bench/peers.py: prints {@code READY <unix time>} when the instance is
 * RUNNING, {@code DONE <unix time>} once {@code --records} records were counted and a commit
 * (an EOS v2 transaction: output, changelog and input offsets) completed after that, then
 * waits for its stdin to close and shuts down.
 *
 * <p>Arguments: bootstrap input output records commitIntervalMs stateDir applicationId
 * [standbyReplicas [traced]].
 */
public final class PageViews {
  /** Streaming JSON in and out: no tree per record, only the fields the workload needs. */
  private static final JsonFactory JSON = new JsonFactory();

  /**
   * The record cache of the instance (one stream thread). The workload has 2,000 pages; a
   * cache entry of this store is estimated (not measured) at 150 bytes (key, serialized count,
   * and the cache's own per-entry bookkeeping), so 2,000 entries take about 300 KB. 4 MiB holds every key with
   * more than 10× headroom, so no entry is evicted (written through) between two commits.
   */
  static final long CACHE_BYTES = 4L * 1024 * 1024;

  /** Records per poll: 5× Streams' own default (1,000), fewer polls per record. */
  static final int MAX_POLL_RECORDS = 5000;

  /** Producer batch: 256 KiB (Kafka's default is 16 KiB), fewer produce requests. */
  static final int BATCH_BYTES = 256 * 1024;

  /**
   * linger.ms: Streams' own default for its producers, set here so it is written down. At
   * the suite's rates a batch fills to {@link #BATCH_BYTES} well within it, and every commit
   * flushes the producer anyway.
   */
  static final int LINGER_MS = 100;

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

  /**
   * {page, section[\tseq\tts]} of an event, as workload.parse: /section/page of the URL.
   *
   * <p>A streaming parse that stops at the URL (the third field; traced: once seq and ts are
   * read too), and plain indexOf on the URL: no tree, no regular expression per record.
   */
  static KeyValue<String, String> parse(byte[] value, boolean traced) {
    String url = null;
    long seq = 0, ts = 0;
    boolean haveSeq = false, haveTs = false;
    try (JsonParser p = JSON.createParser(value)) {
      if (p.nextToken() != JsonToken.START_OBJECT) {
        throw new IllegalArgumentException("input record is not a JSON object");
      }
      String name;
      while ((name = p.nextFieldName()) != null) {
        p.nextToken();
        switch (name) {
          case "url" -> url = p.getText();
          case "seq" -> {
            seq = p.getLongValue();
            haveSeq = true;
          }
          case "ts" -> {
            ts = p.getLongValue();
            haveTs = true;
          }
          default -> p.skipChildren();
        }
        if (url != null && (!traced || (haveSeq && haveTs))) {
          break;
        }
      }
    } catch (IOException e) {
      throw new IllegalArgumentException("input record is not JSON: " + e.getMessage(), e);
    }
    if (url == null || (traced && !(haveSeq && haveTs))) {
      throw new IllegalArgumentException("input record lacks url" + (traced ? ", seq or ts" : ""));
    }
    // workload.parse: path = url after "://", up to "?"; path = host/section/page.
    int scheme = url.indexOf("://");
    int query = url.indexOf('?', scheme + 3);
    String path = url.substring(scheme + 3, query < 0 ? url.length() : query);
    int s1 = path.indexOf('/');
    int s2 = s1 < 0 ? -1 : path.indexOf('/', s1 + 1);
    if (scheme < 0 || s2 < 0) {
      throw new IllegalArgumentException("URL without /section/page: " + url);
    }
    String section = path.substring(s1 + 1, s2);
    String view = traced ? section + "\t" + seq + "\t" + ts : section;
    return KeyValue.pair(path.substring(s1), view);
  }

  /** The output row of one count, compact JSON by Jackson's streaming generator. */
  static byte[] render(String page, Count c, boolean traced, ByteArrayOutputStream buf) {
    buf.reset();
    try (JsonGenerator g = JSON.createGenerator(buf)) {
      g.writeStartObject();
      g.writeStringField("page", page);
      g.writeStringField("section", c.section());
      g.writeNumberField("views", c.views());
      if (traced) {
        g.writeNumberField("seq", c.seq());
        g.writeNumberField("ts", c.ts());
      }
      g.writeEndObject();
    } catch (IOException e) {
      throw new IllegalStateException("cannot render " + page, e);
    }
    return buf.toByteArray();
  }

  /**
   * The keyed count over the cached store "counts": one get and one put per record, both
   * served by the record cache; each update forwarded downstream at once.
   */
  static final class CountProcessor implements Processor<String, String, String, byte[]> {
    private final boolean traced;
    private final AtomicLong counted;
    private final ByteArrayOutputStream buf = new ByteArrayOutputStream(128);
    private ProcessorContext<String, byte[]> context;
    private KeyValueStore<String, Count> store;

    CountProcessor(boolean traced, AtomicLong counted) {
      this.traced = traced;
      this.counted = counted;
    }

    @Override
    public void init(ProcessorContext<String, byte[]> context) {
      this.context = context;
      this.store = context.getStateStore("counts");
    }

    @Override
    public void process(Record<String, String> r) {
      String page = r.key();
      String view = r.value();
      Count acc = store.get(page);
      long views = (acc == null ? 0 : acc.views()) + 1;
      Count next;
      if (traced) {
        int t1 = view.indexOf('\t');
        int t2 = view.indexOf('\t', t1 + 1);
        next =
            new Count(
                view.substring(0, t1),
                views,
                Long.parseLong(view, t1 + 1, t2, 10),
                Long.parseLong(view, t2 + 1, view.length(), 10));
      } else {
        next = new Count(view, views, 0, 0);
      }
      store.put(page, next);
      counted.incrementAndGet();
      context.forward(r.withValue(render(page, next, traced, buf)));
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

  /** The Streams configuration; each setting's reason beside it (and in docs/benchmarks.md). */
  static Properties config(String[] args) {
    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[6]);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    // The guarantee Spillway gives: output, changelog and input offsets in one transaction.
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    // Spillway's checkpoint interval (Streams' EOS default is 100 ms): a transaction, and a
    // flush of the record cache to RocksDB and the changelog, as often as Spillway commits.
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args[4]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[5]);
    // Record cache on, sized to the key count (CACHE_BYTES): the store and its changelog get
    // each changed page once per commit instead of once per record.
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, CACHE_BYTES);
    // Two cores, shared with the broker: one stream thread, as every engine has parallelism 1.
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, args.length > 7 ? args[7] : "0");
    // One broker.
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), MAX_POLL_RECORDS);
    p.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), BATCH_BYTES);
    p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), LINGER_MS);
    // B3 kills an instance: the broker's lowest session time-out (group.min.session.timeout.ms)
    // lets the survivor take its tasks over in seconds, not Kafka's default 45 s.
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1500);
    return p;
  }

  public static void main(String[] args) throws Exception {
    if (args.length < 7) {
      System.err.println(
          "usage: PageViews bootstrap input output records commitIntervalMs stateDir appId"
              + " [standbys [traced]]");
      System.exit(2);
    }
    String input = args[1], output = args[2];
    long records = Long.parseLong(args[3]);
    boolean traced = args.length > 8 && args[8].equals("traced");
    Properties p = config(args);

    AtomicLong counted = new AtomicLong();
    StreamsBuilder b = new StreamsBuilder();
    // The store of the count: RocksDB with a changelog, behind the record cache.
    b.addStateStore(
        Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore("counts"), Serdes.String(), new CountSerde(traced))
            .withCachingEnabled());
    b.stream(input, Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
        .map((k, v) -> parse(v, traced), Named.as("parse"))
        // process() does not repartition by itself: the explicit repartition topic puts every
        // page in one task, as the DSL's groupByKey did.
        .repartition(Repartitioned.with(Serdes.String(), Serdes.String()).withName("by-page"))
        .process(() -> new CountProcessor(traced, counted), Named.as("count"), "counts")
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
