// The seed pipeline as a Kafka Connect sink (scripts/connect-seed.sh, docs/TESTING.md "A real
// Kafka Connect worker"): each record of the seed's dns_logs csv is written to the audit's
// MariaDB table with its Kafka partition and offset (the `offset_columns` strategy), so the
// auditor can tell exactly which offsets landed.
//
// Failure on purpose, the two ways a real sink loses or stops on a record:
// - `seed.put.poison`: a record whose value contains it makes put() throw a ConnectException.
//   Connect kills the task whatever errors.tolerance says (tolerance covers conversion and
//   transforms, not the sink's own put): the task goes FAILED with a trace, as when a sink's
//   database refuses a row.
// - `value.converter.seed.poison` (SeedConverter below): the converter throws a DataException
//   on such a value. With errors.tolerance=none the task FAILED ("Tolerance exceeded"); with
//   errors.tolerance=all and no dead-letter queue the record is skipped and its offset
//   committed: lost without a trace in Kafka.
//
// One file for the connector, its task and the converter (the script compiles it into one
// jar, cached by this file's hash). Records are hostile input: a value that is not the csv
// is written with NULL columns, never thrown on (only the poison is).
package gapauditor.connect;

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.connect.connector.Task;
import org.apache.kafka.connect.data.SchemaAndValue;
import org.apache.kafka.connect.errors.ConnectException;
import org.apache.kafka.connect.errors.DataException;
import org.apache.kafka.connect.errors.RetriableException;
import org.apache.kafka.connect.sink.SinkConnector;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.sink.SinkTask;
import org.apache.kafka.connect.storage.StringConverter;

public class SeedSinkConnector extends SinkConnector {
  static final String VERSION = "1";
  static final ConfigDef CONFIG =
      new ConfigDef()
          .define("seed.jdbc.url", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "JDBC URL")
          .define("seed.jdbc.user", ConfigDef.Type.STRING, "", ConfigDef.Importance.HIGH, "user")
          .define(
              "seed.jdbc.password",
              ConfigDef.Type.PASSWORD,
              "",
              ConfigDef.Importance.HIGH,
              "password")
          .define("seed.table", ConfigDef.Type.STRING, ConfigDef.Importance.HIGH, "table")
          .define(
              "seed.put.poison",
              ConfigDef.Type.STRING,
              "",
              ConfigDef.Importance.LOW,
              "put() throws on a value containing this (blank: never)");

  private Map<String, String> props;

  @Override
  public String version() {
    return VERSION;
  }

  @Override
  public void start(Map<String, String> props) {
    this.props = props;
  }

  @Override
  public Class<? extends Task> taskClass() {
    return SeedSinkTask.class;
  }

  @Override
  public List<Map<String, String>> taskConfigs(int maxTasks) {
    // One task: the seed topic has one partition.
    return Collections.singletonList(props);
  }

  @Override
  public void stop() {}

  @Override
  public ConfigDef config() {
    return CONFIG;
  }

  /** Writes each record with its partition and offset; throws on the put poison. */
  public static class SeedSinkTask extends SinkTask {
    private Connection db;
    private PreparedStatement insert;
    private String poison;

    @Override
    public String version() {
      return VERSION;
    }

    @Override
    public void start(Map<String, String> props) {
      String url = props.get("seed.jdbc.url");
      String table = props.getOrDefault("seed.table", "");
      poison = props.getOrDefault("seed.put.poison", "");
      // The table name is the script's; quoted all the same.
      if (url == null || table.isEmpty() || table.contains("`")) {
        throw new ConnectException("seed.jdbc.url and seed.table (without backquotes) are required");
      }
      try {
        db =
            DriverManager.getConnection(
                url, props.getOrDefault("seed.jdbc.user", ""), props.getOrDefault("seed.jdbc.password", ""));
        db.setAutoCommit(true);
        // At least once: a redelivered record overwrites its own row.
        insert =
            db.prepareStatement(
                "INSERT INTO `"
                    + table
                    + "` (`partition`, `offset`, client_ip, domain, `time`) VALUES (?, ?, ?, ?, ?)"
                    + " ON DUPLICATE KEY UPDATE client_ip = VALUES(client_ip)");
      } catch (SQLException e) {
        throw new ConnectException("cannot open the seed table", e);
      }
    }

    @Override
    public void put(Collection<SinkRecord> records) {
      for (SinkRecord r : records) {
        String value = r.value() == null ? "" : r.value().toString();
        if (!poison.isEmpty() && value.contains(poison)) {
          // What a sink does when its store refuses a row for good: not retriable.
          throw new ConnectException(
              "seed sink refuses the poison record at "
                  + r.topic()
                  + "-"
                  + r.kafkaPartition()
                  + " offset "
                  + r.kafkaOffset());
        }
        String[] f = value.split("\\|", -1);
        try {
          insert.setInt(1, r.kafkaPartition() == null ? -1 : r.kafkaPartition());
          insert.setLong(2, r.kafkaOffset());
          insert.setString(3, f.length > 0 ? f[0] : null);
          insert.setString(4, f.length > 1 ? f[1] : null);
          insert.setString(5, f.length > 2 ? f[2] : null);
          insert.executeUpdate();
        } catch (SQLException e) {
          // The database, not the record: Connect retries the batch.
          throw new RetriableException("seed table write failed", e);
        }
      }
    }

    @Override
    public void stop() {
      try {
        if (db != null) {
          db.close();
        }
      } catch (SQLException e) {
        // Closing: nothing left to lose.
      }
    }
  }

  /**
   * The StringConverter, but a value containing `seed.poison` cannot be converted (what a
   * JsonConverter or Avro converter does with a record that is not its format).
   */
  public static class SeedConverter extends StringConverter {
    private String poison = "";

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
      Object p = configs.get("seed.poison");
      poison = p == null ? "" : p.toString();
      super.configure(configs, isKey);
    }

    @Override
    public SchemaAndValue toConnectData(String topic, byte[] value) {
      SchemaAndValue v = super.toConnectData(topic, value);
      if (!poison.isEmpty() && v.value() != null && v.value().toString().contains(poison)) {
        throw new DataException("seed converter cannot read the poison record of " + topic);
      }
      return v;
    }

    @Override
    public SchemaAndValue toConnectData(String topic, Headers headers, byte[] value) {
      return toConnectData(topic, value);
    }
  }
}
