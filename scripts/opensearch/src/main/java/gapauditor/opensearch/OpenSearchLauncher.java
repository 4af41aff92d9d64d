package gapauditor.opensearch;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.appender.ConsoleAppender;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilder;
import org.apache.logging.log4j.core.config.builder.api.ConfigurationBuilderFactory;
import org.apache.logging.log4j.core.config.builder.impl.BuiltConfiguration;
import org.opensearch.action.admin.cluster.health.ClusterHealthResponse;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.settings.Settings;
import org.opensearch.common.unit.TimeValue;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.transport.Netty4Plugin;

/**
 * A single-node OpenSearch in one JVM, from Maven Central jars alone, for the integration
 * tests: {@code OpenSearchLauncher PORT HOME [CLUSTER_NAME]}.
 *
 * <p>It builds the {@link Node} itself instead of going through OpenSearch's Bootstrap,
 * because Bootstrap insists on a distribution layout (plugins/ and modules/ directories of
 * plugin zips, a security policy, jar-hell and production bootstrap checks). Handing the
 * plugin classes to the Node constructor loads them from the classpath instead, with no
 * security manager and no jar-hell check involved, so no -Dtests.* flags are needed.
 */
public final class OpenSearchLauncher {

    public static void main(String[] args) throws Exception {
        if (args.length < 2 || args.length > 3) {
            System.err.println("usage: OpenSearchLauncher PORT HOME [CLUSTER_NAME]");
            System.exit(2);
        }
        int port = Integer.parseInt(args[0]);
        Path home = Path.of(args[1]).toAbsolutePath();
        String clusterName = args.length == 3 ? args[2] : "gap-auditor-test";

        // Before anything touches a logger: with no configuration log4j would print only
        // errors. stderr, so that stdout carries nothing but the ready line.
        if (System.getProperty("log4j2.configurationFile") == null
                && System.getProperty("log4j.configurationFile") == null) {
            configureLogging();
        }

        Files.createDirectories(home.resolve("data"));
        Files.createDirectories(home.resolve("logs"));
        Settings settings = Settings.builder()
            .put("cluster.name", clusterName)
            .put("node.name", "opensearch-" + port)
            .put("path.home", home.toString())
            // data under HOME, so a restart on the same HOME finds the same indices
            .put("path.data", home.resolve("data").toString())
            .put("path.logs", home.resolve("logs").toString())
            // no discovery, no bootstrap, the node elects itself at once
            .put("discovery.type", "single-node")
            // both HTTP and transport on loopback only
            .put("network.host", "127.0.0.1")
            .put("http.port", port)
            // nothing connects to the transport port: an ephemeral one can never collide
            .put("transport.port", 0)
            // a nearly full CI disk must not turn the test indices read-only
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .build();
        // Reads HOME/config/opensearch.yml when one exists, so a test may add settings there.
        Environment env = InternalSettingsPreparer.prepareEnvironment(settings, Map.of(), null, () -> "opensearch-" + port);

        // Netty4Plugin is the real HTTP layer; CommonAnalysisPlugin is the module every
        // distribution ships (dynamic mappings only need the built-in keyword/standard, but
        // an index created elsewhere may name its analyzers). The constructor taking plugin
        // classes is protected, hence the anonymous subclass.
        Node node = new Node(env, List.of(Netty4Plugin.class, CommonAnalysisPlugin.class), true) {};

        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // closing flushes the shards and releases the node lock, so the next start on
            // the same HOME recovers quickly and cleanly
            try {
                node.close();
                node.awaitClose(20, TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                closed.countDown();
            }
        }, "opensearch-launcher-shutdown"));

        node.start();

        // start() returns once HTTP is bound and a cluster-manager is elected, but after a
        // restart the existing shards are still recovering; a test must not see 503s.
        ClusterHealthResponse health = node.client().admin().cluster().prepareHealth()
            .setWaitForYellowStatus()
            .setTimeout(TimeValue.timeValueSeconds(60))
            .get();
        if (health.isTimedOut()) {
            System.err.println("opensearch: cluster not yellow after 60s: " + health.getStatus());
        }
        System.out.println("opensearch ready on 127.0.0.1:" + port);
        System.out.flush();

        // OpenSearch's threads are daemons: without this the JVM would exit right here.
        closed.await();
    }

    private static void configureLogging() {
        ConfigurationBuilder<BuiltConfiguration> b = ConfigurationBuilderFactory.newConfigurationBuilder();
        b.setStatusLevel(Level.ERROR);
        b.add(b.newAppender("stderr", "Console")
            .addAttribute("target", ConsoleAppender.Target.SYSTEM_ERR)
            .add(b.newLayout("PatternLayout").addAttribute("pattern", "[%d{ISO8601}][%-5p][%c{1.}] %m%n")));
        String level = System.getProperty("opensearch.launcher.log.level", "INFO");
        b.add(b.newRootLogger(Level.toLevel(level, Level.INFO)).add(b.newAppenderRef("stderr")));
        Configurator.reconfigure(b.build());
    }
}
