package memmachine.testing;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Path;
import java.util.Map;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.io.ByteUnit;

/**
 * A Neo4j DBMS for memmachine's tests: Bolt on 127.0.0.1:PORT, data under HOME.
 *
 * <p>Usage: {@code Neo4jTestServer HOME PORT}. With NEO4J_TEST_PASSWORD set, authentication is
 * on and user {@code neo4j} gets that password; without, it is off. Prints one line,
 * {@code ready}, once Bolt accepts connections, then serves until standard input closes or the
 * JVM is asked to stop (SIGTERM), and shuts the DBMS down cleanly either way.
 */
public final class Neo4jTestServer {
    private Neo4jTestServer() {}

    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: Neo4jTestServer HOME PORT");
            System.exit(2);
        }
        Path home = Path.of(args[0]);
        int port = Integer.parseInt(args[1]);
        String password = System.getenv("NEO4J_TEST_PASSWORD");
        boolean auth = password != null && !password.isEmpty();

        DatabaseManagementServiceBuilder builder = new DatabaseManagementServiceBuilder(home);
        String conf = System.getenv("NEO4J_TEST_CONF"); // extra settings, as in neo4j.conf
        if (conf != null && !conf.isEmpty()) {
            builder.loadPropertiesFromFile(Path.of(conf));
        }
        DatabaseManagementService dbms = builder
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", port))
                .setConfig(GraphDatabaseSettings.auth_enabled, auth)
                .setConfig(GraphDatabaseSettings.pagecache_memory, ByteUnit.mebiBytes(256))
                .build();
        Runtime.getRuntime().addShutdownHook(new Thread(dbms::shutdown, "neo4j-test-shutdown"));

        if (auth) {
            // A restart over the same home (a test killing the server) finds the password
            // already set, and Neo4j refuses to set a password to itself: set it only while
            // the initial one still asks to be changed.
            GraphDatabaseService system = dbms.database(GraphDatabaseSettings.SYSTEM_DATABASE_NAME);
            boolean initial = system.executeTransactionally(
                    "SHOW USERS YIELD user, passwordChangeRequired "
                            + "WHERE user = 'neo4j' RETURN passwordChangeRequired",
                    Map.of(),
                    result -> result.hasNext()
                            && Boolean.TRUE.equals(result.next().get("passwordChangeRequired")));
            if (initial) {
                system.executeTransactionally(
                        "ALTER USER neo4j SET PASSWORD $password CHANGE NOT REQUIRED",
                        Map.of("password", password));
            }
        }
        System.out.println("ready");
        System.out.flush();

        // Serve until the parent closes our standard input (or dies, which closes it too).
        InputStream in = System.in;
        byte[] buffer = new byte[256];
        while (in.read(buffer) >= 0) {
            // ignore anything written to us
        }
        System.exit(0); // runs the shutdown hook
    }
}
