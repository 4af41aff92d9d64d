// A MariaDB/MySQL dialect for flink-connector-jdbc 4.0 (Flink 2.0), which ships none: the
// real-Flink seed run (scripts/flink-seed.sh) writes its rows into MariaDB through it.
// Registered as a JdbcFactory service (META-INF/services, made by the script); the JDBC
// driver is Debian's libmariadb-java. Test tooling only: not part of the auditor.
package gapauditor.flink;

import java.util.Arrays;
import java.util.EnumSet;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.flink.connector.jdbc.core.database.JdbcFactory;
import org.apache.flink.connector.jdbc.core.database.catalog.JdbcCatalog;
import org.apache.flink.connector.jdbc.core.database.dialect.AbstractDialect;
import org.apache.flink.connector.jdbc.core.database.dialect.AbstractDialectConverter;
import org.apache.flink.connector.jdbc.core.database.dialect.JdbcDialect;
import org.apache.flink.connector.jdbc.core.database.dialect.JdbcDialectConverter;
import org.apache.flink.table.types.logical.LogicalTypeRoot;
import org.apache.flink.table.types.logical.RowType;

/** `jdbc:mariadb:` and `jdbc:mysql:` URLs. */
public class MariaDbJdbcFactory implements JdbcFactory {
    @Override
    public boolean acceptsURL(String url) {
        return url.startsWith("jdbc:mariadb:") || url.startsWith("jdbc:mysql:");
    }

    @Override
    public JdbcDialect createDialect() {
        return new MariaDbDialect();
    }

    @Override
    public JdbcCatalog createCatalog(
            ClassLoader cl, String name, String db, String user, String pwd, String url) {
        throw new UnsupportedOperationException("no MariaDB catalog: declare the table in SQL");
    }

    /** The statements MySQL and MariaDB share: backquotes, LIMIT, ON DUPLICATE KEY UPDATE. */
    static class MariaDbDialect extends AbstractDialect {
        private static final long serialVersionUID = 1L;

        @Override
        public JdbcDialectConverter getRowConverter(RowType rowType) {
            return new Converter(rowType);
        }

        @Override
        public Optional<String> defaultDriverName() {
            return Optional.of("org.mariadb.jdbc.Driver");
        }

        @Override
        public String quoteIdentifier(String identifier) {
            return "`" + identifier + "`";
        }

        @Override
        public String dialectName() {
            return "MariaDB";
        }

        @Override
        public String getLimitClause(long limit) {
            return "LIMIT " + limit;
        }

        @Override
        public Optional<String> getUpsertStatement(
                String table, String[] fields, String[] uniqueKeys) {
            String updates =
                    Arrays.stream(fields)
                            .map(f -> quoteIdentifier(f) + "=VALUES(" + quoteIdentifier(f) + ")")
                            .collect(Collectors.joining(", "));
            return Optional.of(
                    getInsertIntoStatement(table, fields) + " ON DUPLICATE KEY UPDATE " + updates);
        }

        @Override
        public Set<LogicalTypeRoot> supportedTypes() {
            return EnumSet.of(
                    LogicalTypeRoot.CHAR,
                    LogicalTypeRoot.VARCHAR,
                    LogicalTypeRoot.BOOLEAN,
                    LogicalTypeRoot.DECIMAL,
                    LogicalTypeRoot.TINYINT,
                    LogicalTypeRoot.SMALLINT,
                    LogicalTypeRoot.INTEGER,
                    LogicalTypeRoot.BIGINT,
                    LogicalTypeRoot.FLOAT,
                    LogicalTypeRoot.DOUBLE,
                    LogicalTypeRoot.DATE,
                    LogicalTypeRoot.TIME_WITHOUT_TIME_ZONE,
                    LogicalTypeRoot.TIMESTAMP_WITHOUT_TIME_ZONE);
        }
    }

    /** The generic conversions are MySQL's too. */
    static class Converter extends AbstractDialectConverter {
        private static final long serialVersionUID = 1L;

        Converter(RowType rowType) {
            super(rowType);
        }

        @Override
        public String converterName() {
            return "MariaDB";
        }
    }
}
