// Load driver of bench/curator_delay_queue.sh: Apache Curator's DistributedDelayQueue (the
// Debian libcurator-recipes-java package) under the workload bench/delayed.sh puts on zkcron.
// Compiled and run by that script; not part of the Rust build.
//
// Three commands, each one JVM and one Curator client (one ZooKeeper session):
//
//   submit  --connect C --path P --n N [--delay-ms D] [--spread-ms S] [--threads T]
//           [--window W] [--multi K] [--multi-window M]
//       Puts N items due D ms ahead, spread over S ms, four ways, and prints one line each:
//         mode=sync        put() with putInBackground(false): one create round trip at a time
//         mode=sync-threads the same from T threads sharing the queue (T creates out at once)
//         mode=background  put() as Curator builds it by default (putInBackground(true)), at most
//                          W puts not yet acknowledged, then flushPuts()
//         mode=multi       putMulti(): K items in ONE znode (so all K share one due instant), at
//                          most M znodes not yet acknowledged
//   put     --connect C --path P --n N --prefix X [--delay-ms D] [--spread-ms S] [--window W]
//           [--marker true]
//       Background puts of N items "X<i>@<due ms>" due D ms ahead over S ms (W out at once); with
//       --marker one more item due now. Prints the rate and the queue's child count.
//   consume --connect C --path P --fires FILE [--lock-safety true]
//       A QueueConsumer on the queue (Curator's default executor: one item at a time in the queue's
//       thread). Every consumed item appends "<item> <due ms> <consume instant, epoch ms.µs>" to
//       FILE; the first one also prints "curator_first_consume ready_ms=<since queue.start()>".
//       Runs until killed (SIGTERM closes the queue and the client).
//
// Output lines starting with "curator " are the machine-readable figures; lines starting with
// "# " are details. Curator and ZooKeeper log through slf4j (stderr).

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.queue.DistributedDelayQueue;
import org.apache.curator.framework.recipes.queue.MultiItem;
import org.apache.curator.framework.recipes.queue.QueueBuilder;
import org.apache.curator.framework.recipes.queue.QueueConsumer;
import org.apache.curator.framework.recipes.queue.QueuePutListener;
import org.apache.curator.framework.recipes.queue.QueueSerializer;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.data.Stat;

public final class DelayQueueBench {
  private static final QueueSerializer<String> SERIALIZER =
      new QueueSerializer<String>() {
        @Override
        public byte[] serialize(String item) {
          return item.getBytes(StandardCharsets.UTF_8);
        }

        @Override
        public String deserialize(byte[] bytes) {
          return new String(bytes, StandardCharsets.UTF_8);
        }
      };

  /** How long a put may wait for a free slot in its window before the run is declared stuck. */
  private static final long STUCK_SECONDS = 60;

  private final Map<String, String> args = new HashMap<>();

  private DelayQueueBench(String[] argv) {
    for (int i = 1; i < argv.length; i += 2) {
      if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
        throw new IllegalArgumentException("expected --key value pairs, got " + argv[i]);
      }
      args.put(argv[i].substring(2), argv[i + 1]);
    }
  }

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) {
      System.err.println("usage: DelayQueueBench submit|put|consume --connect C --path P ...");
      System.exit(2);
    }
    DelayQueueBench bench = new DelayQueueBench(argv);
    switch (argv[0]) {
      case "submit":
        bench.submit();
        break;
      case "put":
        bench.put();
        break;
      case "consume":
        bench.consume();
        return; // runs until killed
      default:
        System.err.println("unknown command " + argv[0]);
        System.exit(2);
    }
    System.exit(0);
  }

  private String str(String key) {
    String v = args.get(key);
    if (v == null) {
      throw new IllegalArgumentException("missing --" + key);
    }
    return v;
  }

  private String str(String key, String dflt) {
    return args.getOrDefault(key, dflt);
  }

  private long num(String key, long dflt) {
    String v = args.get(key);
    return v == null ? dflt : Long.parseLong(v);
  }

  private static void detail(String line) {
    System.out.println("# " + line);
    System.out.flush();
  }

  private static double epochMsMicros() {
    Instant now = Instant.now();
    return now.getEpochSecond() * 1000.0 + now.getNano() / 1_000_000.0;
  }

  private CuratorFramework client() throws Exception {
    CuratorFramework client =
        CuratorFrameworkFactory.builder()
            .connectString(str("connect"))
            .sessionTimeoutMs(10_000)
            .connectionTimeoutMs(10_000)
            .retryPolicy(new ExponentialBackoffRetry(100, 10))
            .build();
    client.start();
    if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
      throw new IllegalStateException("not connected to " + str("connect") + " within 30 s");
    }
    return client;
  }

  /** Due instant of item i of n: base + i * spread / n. */
  private static long due(long base, long spreadMs, long i, long n) {
    return base + (n <= 1 ? 0 : i * spreadMs / n);
  }

  /** Releases one window slot per acknowledged background put (single items and putMulti). */
  private static final class Window implements QueuePutListener<String> {
    final Semaphore free;
    final AtomicInteger done = new AtomicInteger();

    Window(int size) {
      free = new Semaphore(size);
    }

    void take() throws InterruptedException {
      if (!free.tryAcquire(STUCK_SECONDS, TimeUnit.SECONDS)) {
        // Curator's background put drops a failed create without telling the caller (its
        // callback returns on a non-OK result), so a lost put shows up only as a slot never freed.
        throw new IllegalStateException(
            "no background put acknowledged for " + STUCK_SECONDS + " s (" + done.get()
                + " acknowledged so far); Curator drops failed background puts silently");
      }
    }

    @Override
    public void putCompleted(String item) {
      done.incrementAndGet();
      free.release();
    }

    @Override
    public void putMultiCompleted(MultiItem<String> items) {
      done.incrementAndGet();
      free.release();
    }
  }

  private static DistributedDelayQueue<String> producer(
      CuratorFramework client, String path, boolean background) throws Exception {
    DistributedDelayQueue<String> queue =
        QueueBuilder.builder(client, null, SERIALIZER, path)
            .putInBackground(background)
            .buildDelayQueue();
    queue.start();
    return queue;
  }

  private static void flush(DistributedDelayQueue<String> queue) throws InterruptedException {
    if (!queue.flushPuts(STUCK_SECONDS, TimeUnit.SECONDS)) {
      throw new IllegalStateException("flushPuts: puts still not acknowledged after "
          + STUCK_SECONDS + " s (a failed background put is never acknowledged)");
    }
  }

  private static void rate(String mode, String how, long n, long t0, long t1) {
    double seconds = (t1 - t0) / 1e9;
    System.out.printf("curator submit mode=%s %s n=%d seconds=%.3f submit_per_s=%.0f%n",
        mode, how, n, seconds, n / seconds);
    System.out.flush();
  }

  private void submit() throws Exception {
    String path = str("path");
    long n = num("n", 2000);
    long delayMs = num("delay-ms", 86_400_000L);
    long spreadMs = num("spread-ms", 3_600_000L);
    int threads = (int) num("threads", 32);
    int window = (int) num("window", 256);
    int multi = (int) num("multi", 100);
    int multiWindow = (int) num("multi-window", 8);
    try (CuratorFramework client = client()) {
      // 1. put(), synchronous, one at a time.
      try (DistributedDelayQueue<String> queue = producer(client, path, false)) {
        long base = System.currentTimeMillis() + delayMs;
        long t0 = System.nanoTime();
        for (long i = 0; i < n; i++) {
          long due = due(base, spreadMs, i, n);
          queue.put("sync-" + i + "@" + due, due);
        }
        rate("sync", "threads=1", n, t0, System.nanoTime());
      }
      // 2. put(), synchronous, from several threads sharing the one client.
      try (DistributedDelayQueue<String> queue = producer(client, path, false)) {
        long base = System.currentTimeMillis() + delayMs;
        AtomicLong next = new AtomicLong();
        AtomicReference<Exception> failed = new AtomicReference<>();
        Thread[] pool = new Thread[threads];
        long t0 = System.nanoTime();
        for (int t = 0; t < threads; t++) {
          pool[t] =
              new Thread(
                  () -> {
                    try {
                      for (long i = next.getAndIncrement(); i < n && failed.get() == null; i = next.getAndIncrement()) {
                        long due = due(base, spreadMs, i, n);
                        queue.put("threads-" + i + "@" + due, due);
                      }
                    } catch (Exception e) {
                      failed.compareAndSet(null, e);
                    }
                  });
          pool[t].start();
        }
        for (Thread t : pool) {
          t.join();
        }
        if (failed.get() != null) {
          throw failed.get();
        }
        rate("sync-threads", "threads=" + threads, n, t0, System.nanoTime());
      }
      // 3. put() in the background (Curator's default), a bounded window of puts out at once.
      try (DistributedDelayQueue<String> queue = producer(client, path, true)) {
        Window w = new Window(window);
        queue.getPutListenerContainer().addListener(w);
        long base = System.currentTimeMillis() + delayMs;
        long t0 = System.nanoTime();
        for (long i = 0; i < n; i++) {
          long due = due(base, spreadMs, i, n);
          w.take();
          queue.put("bg-" + i + "@" + due, due);
        }
        flush(queue);
        rate("background", "window=" + window, n, t0, System.nanoTime());
      }
      // 4. putMulti(): K items per znode, one due instant per znode.
      try (DistributedDelayQueue<String> queue = producer(client, path, true)) {
        Window w = new Window(multiWindow);
        queue.getPutListenerContainer().addListener(w);
        long base = System.currentTimeMillis() + delayMs;
        long t0 = System.nanoTime();
        for (long i = 0; i < n; i += multi) {
          long first = i;
          long count = Math.min(multi, n - i);
          long due = due(base, spreadMs, i, n);
          AtomicInteger k = new AtomicInteger();
          w.take();
          queue.putMulti(
              () -> {
                int j = k.getAndIncrement();
                return j < count ? "multi-" + (first + j) + "@" + due : null;
              },
              due);
        }
        flush(queue);
        rate("multi", "items_per_znode=" + multi + " window=" + multiWindow, n, t0,
            System.nanoTime());
      }
      Stat stat = client.checkExists().forPath(path);
      detail("queue " + path + " now has " + (stat == null ? 0 : stat.getNumChildren())
          + " children");
    }
  }

  private void put() throws Exception {
    String path = str("path");
    String prefix = str("prefix");
    long n = num("n", 0);
    long delayMs = num("delay-ms", 5_000);
    long spreadMs = num("spread-ms", 0);
    int window = (int) num("window", 256);
    boolean marker = Boolean.parseBoolean(str("marker", "false"));
    try (CuratorFramework client = client();
        DistributedDelayQueue<String> queue = producer(client, path, true)) {
      Window w = new Window(window);
      queue.getPutListenerContainer().addListener(w);
      long base = System.currentTimeMillis() + delayMs;
      long t0 = System.nanoTime();
      for (long i = 0; i < n; i++) {
        long due = due(base, spreadMs, i, n);
        w.take();
        queue.put(prefix + i + "@" + due, due);
      }
      flush(queue);
      long t1 = System.nanoTime();
      long doneAt = System.currentTimeMillis();
      if (n > 0) {
        System.out.printf(
            "# put n=%d seconds=%.3f per_s=%.0f window=%d; last acknowledged %d ms before the first"
                + " was due%n",
            n, (t1 - t0) / 1e9, n / ((t1 - t0) / 1e9), window, base - doneAt);
        System.out.printf("put_margin_ms=%d%n", base - doneAt);
      }
      if (marker) {
        long due = System.currentTimeMillis();
        queue.put("marker-" + prefix + "@" + due, due);
        flush(queue);
        detail("marker put, due " + due);
      }
      Stat stat = client.checkExists().forPath(path);
      System.out.println("children=" + (stat == null ? 0 : stat.getNumChildren()));
      System.out.flush();
    }
  }

  private void consume() throws Exception {
    String path = str("path");
    boolean lockSafety = Boolean.parseBoolean(str("lock-safety", "false"));
    PrintWriter fires = new PrintWriter(new BufferedWriter(new FileWriter(str("fires"), true)));
    AtomicBoolean first = new AtomicBoolean(true);
    AtomicReference<Long> startNanos = new AtomicReference<>(0L);
    QueueConsumer<String> consumer =
        new QueueConsumer<String>() {
          @Override
          public void consumeMessage(String item) {
            double at = epochMsMicros();
            long now = System.nanoTime();
            int sep = item.lastIndexOf('@');
            String due = sep < 0 ? "?" : item.substring(sep + 1);
            synchronized (fires) {
              fires.printf("%s %s %.3f%n", item, due, at);
              fires.flush();
            }
            if (first.compareAndSet(true, false)) {
              System.out.printf("curator_first_consume ready_ms=%.1f item=%s%n",
                  (now - startNanos.get()) / 1e6, item);
              System.out.flush();
            }
          }

          @Override
          public void stateChanged(CuratorFramework client, ConnectionState newState) {
            detail("connection state " + newState + " at " + System.currentTimeMillis());
          }
        };
    CuratorFramework client = client();
    QueueBuilder<String> builder = QueueBuilder.builder(client, consumer, SERIALIZER, path);
    if (lockSafety) {
      builder.lockPath(path + "-locks");
    }
    DistributedDelayQueue<String> queue = builder.buildDelayQueue();
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  try {
                    queue.close();
                  } catch (IOException | RuntimeException ignored) {
                    // exiting anyway
                  }
                  client.close();
                  synchronized (fires) {
                    fires.flush();
                  }
                }));
    detail("consumer starting on " + path + (lockSafety ? " with lock safety" : "")
        + " at " + System.currentTimeMillis());
    startNanos.set(System.nanoTime());
    queue.start();
    detail(String.format("queue.start() returned after %.1f ms",
        (System.nanoTime() - startNanos.get()) / 1e6));
    System.out.println("consumer_started");
    System.out.flush();
    Thread.currentThread().join(); // until killed
  }
}
