//! The MySQL-protocol verifier against the real MariaDB that `scripts/test-env.sh` starts
//! (`GAP_AUDITOR_TEST_MYSQL`; root over `GAP_AUDITOR_TEST_MYSQL_SOCKET` with the `mariadb`
//! client for the global settings). MariaDB stands in for Doris here: what is checked is
//! the client side (how answers are read, how each session is checked), which is the same.
//!
//! - Values of an unexpected type in an answer are errors naming the query and the column,
//!   never a panic (mysql_async's typed row conversion panics on them).
//! - NO_BACKSLASH_ESCAPES is read per connection: the GLOBAL `sql_mode` is changed while the
//!   pool opens new connections, so one pool holds sessions of both modes.
//! - A session whose character set is not UTF-8 (`gbk`, set by `init_connect` for one
//!   dedicated user only, so no other test's connections change) is switched with
//!   `SET NAMES utf8mb4` before any literal is sent.
//!
//! - On MariaDB the key count's derived rows go as a value list, to Doris as `UNION ALL
//!   SELECT` branches (read off the general log).
//! - Full key batches go to MariaDB as one prepared statement per shape and connection,
//!   connections are reused, and a server that refuses to prepare gets the same counts as
//!   text (`max_prepared_stmt_count = 0`).
//!
//! The global changes last well under a second and are undone on drop (also on panic).
//!
//! TLS (`sink.tls`, `sink.ca_file`, the client identity) runs against the second MariaDB
//! that test-env.sh starts with a test CA's certificate and `require_secure_transport=ON`
//! (`GAP_AUDITOR_TEST_MYSQL_TLS`): a connection that succeeds there was encrypted.

use gap_auditor::config::SinkTls;
use gap_auditor::ledger::OffsetRun;
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::sink::tls::TlsSettings;
use gap_auditor::sink::{OffsetExtent, SinkError, Verifier};
use gap_auditor::types::{Key, TopicPartition};
use mysql_async::prelude::Queryable;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn mysql_url() -> String {
    std::env::var("GAP_AUDITOR_TEST_MYSQL")
        .expect("GAP_AUDITOR_TEST_MYSQL is not set: run scripts/test.sh (it starts MariaDB)")
}

fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() % 100_000_000)
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{t}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs SQL as MariaDB's root over the server's socket; returns the output (batch mode).
fn mariadb_root(sql: &str) -> String {
    let socket = std::env::var("GAP_AUDITOR_TEST_MYSQL_SOCKET").expect(
        "GAP_AUDITOR_TEST_MYSQL_SOCKET is not set: run scripts/test.sh (it starts MariaDB)",
    );
    let out = Command::new("mariadb")
        .args([
            "--no-defaults",
            "--socket",
            &socket,
            "-uroot",
            "-N",
            "-B",
            "-r",
            "-e",
            sql,
        ])
        .output()
        .expect("the mariadb client runs");
    assert!(
        out.status.success(),
        "mariadb -uroot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_string()
}

/// Held by the tests that change a server-wide setting others would notice (the general
/// log, `max_prepared_stmt_count`) and by those that prepare statements themselves.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sets a GLOBAL variable (a string) and puts the old value back on drop.
struct Global {
    name: &'static str,
    old: String,
}

impl Global {
    fn set(name: &'static str, value: &str) -> Global {
        let old = mariadb_root(&format!("SELECT @@GLOBAL.{name}"));
        mariadb_root(&format!("SET GLOBAL {name} = {}", quote(value)));
        Global { name, old }
    }
}

impl Drop for Global {
    fn drop(&mut self) {
        mariadb_root(&format!("SET GLOBAL {} = {}", self.name, quote(&self.old)));
    }
}

/// A literal for root's own statements (no backslash or quote in what is passed here
/// except `'`, doubled).
fn quote(s: &str) -> String {
    assert!(!s.contains('\\'));
    format!("'{}'", s.replace('\'', "''"))
}

/// A pool of the test user for setup (prepared statements: independent of the auditor's
/// own escaping).
fn setup_pool() -> mysql_async::Pool {
    mysql_async::Pool::new(mysql_url().as_str())
}

fn offsets_target(table: &str) -> MysqlTarget {
    MysqlTarget {
        table: table.into(),
        columns: gap_auditor::config::SinkColumns {
            partition: "partition".into(),
            offset: "offset".into(),
            topic: None,
            key: Vec::new(),
        },
    }
}

fn keys_target(table: &str) -> MysqlTarget {
    MysqlTarget {
        table: table.into(),
        columns: gap_auditor::config::SinkColumns {
            partition: "partition".into(),
            offset: "offset".into(),
            topic: None,
            key: vec!["k".into()],
        },
    }
}

fn sink_at(url: &str, target: MysqlTarget) -> MysqlSink {
    MysqlSink::new(
        url,
        None,
        None,
        target,
        Duration::from_secs(10),
        "mysql",
        &TlsSettings::default(),
    )
    .expect("sink")
}

fn rejected<T: std::fmt::Debug>(r: Result<T, SinkError>) -> String {
    match r {
        Err(SinkError::Rejected(m)) => m,
        other => panic!("expected a Rejected error, got {other:?}"),
    }
}

/// An offset column that is not an integer column (`VARCHAR` holding `abc`, which MariaDB
/// compares as 0, or `DOUBLE` holding 2.5) answers the listing with values the auditor
/// cannot read as offsets: an error naming the query, the column and the value, not a panic
/// (the typed conversion used before panicked in the audit task: a crash loop). A NULL
/// offset is skipped (it is no offset), a NULL or non-integer count is an error the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unexpected_column_types_are_errors_not_panics() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let tp = TopicPartition::new("t", 0);
    let runs = [OffsetRun::new(0, 9)];
    for (ty, value, shown) in [("VARCHAR(20)", "abc", "'abc'"), ("DOUBLE", "2.5", "2.5")] {
        let table = unique("sink_types");
        c.query_drop(format!(
            "CREATE TABLE `{table}` (`partition` INT, `offset` {ty})"
        ))
        .await
        .expect("create");
        c.exec_drop(
            format!("INSERT INTO `{table}` VALUES (0, ?), (0, '1')"),
            (value,),
        )
        .await
        .expect("insert");
        let sink = sink_at(&mysql_url(), offsets_target(&table));
        let m = rejected(sink.list_offsets(&tp, &runs).await);
        assert!(m.contains("offset listing"), "{ty}: names the query: {m}");
        assert!(m.contains("`offset`"), "{ty}: names the column: {m}");
        assert!(m.contains(shown), "{ty}: shows the value: {m}");
        // Counts are integers whatever the column: they still work, on the same pool.
        let n = sink.count_offsets(&tp, &runs).await.expect("count");
        assert_eq!(n.rows, 2, "{ty}: {n:?}");
        sink.close().await;
        c.query_drop(format!("DROP TABLE `{table}`"))
            .await
            .expect("drop");
    }
    drop(c);
    pool.disconnect().await.expect("disconnect");
}

/// A key holding a backslash, counted over sessions of BOTH backslash modes of ONE pool:
/// the first connection is opened with the server's default mode, then the GLOBAL sql_mode
/// gains NO_BACKSLASH_ESCAPES while four concurrent questions make the pool open three new
/// connections, then it is put back. Every answer must find the row. With the mode read
/// once per pool, the new sessions got literals escaped for the other mode (`'a\\b'` is two
/// backslashes under NO_BACKSLASH_ESCAPES) and found nothing: missing records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backslash_mode_is_read_per_connection() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_nbe");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (k VARCHAR(80) COLLATE utf8mb4_bin) DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    let value = r"C:\dns\a'b\n";
    c.exec_drop(format!("INSERT INTO `{table}` VALUES (?)"), (value,))
        .await
        .expect("insert");
    let key = Key::new([value]);
    let keys = [&key];
    let sink = sink_at(&mysql_url(), keys_target(&table));
    assert_eq!(sink.count_keys(&keys).await.expect("first"), vec![1]);
    // Let the first connection return to the pool.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mode = mariadb_root("SELECT @@GLOBAL.sql_mode");
    assert!(
        !mode.contains("NO_BACKSLASH_ESCAPES"),
        "the test needs the default: {mode}"
    );
    let answers = {
        let _nbe = Global::set("sql_mode", &format!("{mode},NO_BACKSLASH_ESCAPES"));
        // Proof that new sessions get the mode while it is set.
        let mut probe = mysql_async::Conn::from_url(mysql_url())
            .await
            .expect("probe");
        let m: Option<String> = probe.query_first("SELECT @@sql_mode").await.expect("mode");
        assert!(m.unwrap_or_default().contains("NO_BACKSLASH_ESCAPES"));
        probe.disconnect().await.expect("disconnect");
        futures::future::join_all((0..4).map(|_| sink.count_keys(&keys))).await
    };
    for a in answers {
        assert_eq!(a.expect("count"), vec![1], "a session of the other mode");
    }
    // The pool now mixes both modes; whichever connection answers, the row is found.
    for _ in 0..3 {
        for a in futures::future::join_all((0..4).map(|_| sink.count_keys(&keys))).await {
            assert_eq!(a.expect("count"), vec![1]);
        }
    }
    sink.close().await;
    c.query_drop(format!("DROP TABLE `{table}`"))
        .await
        .expect("drop");
    drop(c);
    pool.disconnect().await.expect("disconnect");
}

/// On MariaDB (kind `mysql`) a key count's derived key rows are sent as one value list
/// (`UNION ALL VALUES (..), (..)`, a quarter less server CPU per key than a `UNION ALL
/// SELECT` branch per key); kind `doris` keeps `UNION ALL SELECT`, which Doris takes. Both
/// give the same counts. Read off the server's general log (to a table, for well under a
/// second): what the sink sent, not what it meant to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_gets_key_rows_as_a_value_list_and_doris_as_union_selects() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_tvc");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (k VARCHAR(80) COLLATE utf8mb4_nopad_bin) \
         DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    c.query_drop(format!("INSERT INTO `{table}` VALUES ('a'), ('b'), ('b')"))
        .await
        .expect("insert");
    let (a, b, none) = (Key::new(["a"]), Key::new(["b"]), Key::new(["c"]));
    let keys = [&a, &b, &none];
    let mariadb = sink_at(&mysql_url(), keys_target(&table));
    let doris = MysqlSink::new(
        &mysql_url(),
        None,
        None,
        keys_target(&table),
        Duration::from_secs(10),
        "doris",
        &TlsSettings::default(),
    )
    .expect("sink");
    let (m, d) = {
        let _output = Global::set("log_output", "TABLE");
        let _log = GeneralLog::on();
        (
            mariadb.count_keys(&keys).await.expect("mysql count"),
            doris.count_keys(&keys).await.expect("doris count"),
        )
    };
    assert_eq!(m, vec![1, 2, 0]);
    assert_eq!(d, m);
    let sent = mariadb_root(&format!(
        "SELECT IF(argument LIKE '%UNION ALL VALUES (%', 'values', \
         IF(argument LIKE '%UNION ALL SELECT 1, 1, %', 'selects', 'other')) \
         FROM mysql.general_log WHERE command_type = 'Query' \
         AND argument LIKE 'SELECT MIN(k.i)%{table}%' ORDER BY event_time"
    ));
    assert_eq!(
        sent.lines().collect::<Vec<_>>(),
        ["values", "selects"],
        "{sent}"
    );
    mariadb.close().await;
    doris.close().await;
    c.query_drop(format!("DROP TABLE `{table}`"))
        .await
        .expect("drop");
    drop(c);
    pool.disconnect().await.expect("disconnect");
}

/// Full batches (at least `sql::PREPARED_MIN_KEYS` keys, no empty value) go to MariaDB as
/// a prepared statement: prepared once per connection, which sequential counts reuse, then
/// only executed; a small batch goes as text. A server that refuses to prepare
/// (`max_prepared_stmt_count = 0`, as at its limit) gets the text form, with the same
/// counts, and no error reaches the audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_key_batches_go_prepared_and_fall_back_to_text_when_refused() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_prep");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (k VARCHAR(80) COLLATE utf8mb4_nopad_bin, KEY (k)) \
         DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    c.query_drop(format!(
        "INSERT INTO `{table}` SELECT CONCAT('k', seq) FROM seq_0_to_149 UNION ALL \
         SELECT 'k7' UNION ALL SELECT 'k7 '"
    ))
    .await
    .expect("insert");
    // k0..k99 are there (k7 twice, and 'k7 ' beside it), k150..k179 are not.
    let keys: Vec<Key> = (0..100)
        .chain(150..180)
        .map(|i| Key::new([format!("k{i}").as_str()]))
        .collect();
    let refs: Vec<&Key> = keys.iter().collect();
    let want: Vec<u64> = (0..100)
        .map(|i| if i == 7 { 2 } else { 1 })
        .chain(std::iter::repeat_n(0, 30))
        .collect();
    let sink = sink_at(&mysql_url(), keys_target(&table));
    {
        let _output = Global::set("log_output", "TABLE");
        let _log = GeneralLog::on();
        // mysql_async hands a connection back to its pool on a task of its own, a moment
        // after the count that used it returned: the pause lets it get there, so the next
        // count reuses it instead of opening another (on a busy machine the hand-back
        // lost that race, 2 runs in 9, and a third connection appeared).
        let settle = std::time::Duration::from_millis(100);
        for _ in 0..5 {
            assert_eq!(sink.count_keys(&refs).await.expect("count"), want);
            tokio::time::sleep(settle).await;
        }
        assert_eq!(
            sink.count_keys(&refs[..10]).await.expect("small count"),
            want[..10]
        );
    }
    let sent = |what: &str| {
        mariadb_root(&format!(
            "SELECT {what} FROM mysql.general_log \
             WHERE argument LIKE 'SELECT MIN(k.i)%{table}%'"
        ))
    };
    assert_eq!(sent("SUM(command_type = 'Execute')"), "5");
    assert_eq!(sent("SUM(command_type = 'Query')"), "1", "the small batch");
    // Once per connection, and connections are reused.
    let threads: u32 = sent("COUNT(DISTINCT thread_id)").parse().expect("a count");
    assert_eq!(sent("SUM(command_type = 'Prepare')"), threads.to_string());
    assert!(
        threads <= 2,
        "{threads} connections for 6 sequential counts"
    );
    sink.close().await;

    // Refused: a new sink (no statement prepared yet) answers every count as text.
    let old = mariadb_root("SELECT @@GLOBAL.max_prepared_stmt_count");
    struct Restore(String);
    impl Drop for Restore {
        fn drop(&mut self) {
            mariadb_root(&format!("SET GLOBAL max_prepared_stmt_count = {}", self.0));
        }
    }
    let restore = Restore(old);
    mariadb_root("SET GLOBAL max_prepared_stmt_count = 0");
    let retry = Duration::from_millis(300);
    let sink = sink_at(&mysql_url(), keys_target(&table)).with_prepared_retry(retry);
    for _ in 0..3 {
        assert_eq!(sink.count_keys(&refs).await.expect("count as text"), want);
    }
    drop(restore);
    // The refusal passed: once the retry period is over, counts are prepared again (one
    // refusal must not cost the server the text form's parsing for the daemon's life).
    tokio::time::sleep(retry * 2).await;
    let executes = || -> u32 {
        sent("COALESCE(SUM(command_type = 'Execute'), 0)")
            .parse()
            .expect("a count")
    };
    let before = executes();
    {
        let _output = Global::set("log_output", "TABLE");
        let _log = GeneralLog::on();
        assert_eq!(sink.count_keys(&refs).await.expect("count"), want);
    }
    assert_eq!(
        executes(),
        before + 1,
        "prepared again after the retry period"
    );
    sink.close().await;
    c.query_drop(format!("DROP TABLE `{table}`"))
        .await
        .expect("drop");
    drop(c);
    pool.disconnect().await.expect("disconnect");
}

/// The server's general log, on until dropped (a boolean: `Global` keeps strings).
struct GeneralLog;

impl GeneralLog {
    fn on() -> GeneralLog {
        assert_eq!(
            mariadb_root("SELECT @@GLOBAL.general_log"),
            "0",
            "the test needs the log off"
        );
        mariadb_root("SET GLOBAL general_log = ON");
        GeneralLog
    }
}

impl Drop for GeneralLog {
    fn drop(&mut self) {
        mariadb_root("SET GLOBAL general_log = OFF");
    }
}

/// A MariaDB user with the test user's rights; dropped on drop.
struct User(String);

impl User {
    fn create(prefix: &str) -> User {
        let name = format!("{prefix}{}", std::process::id());
        mariadb_root(&format!(
            "DROP USER IF EXISTS '{name}'@'127.0.0.1'; \
             CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY 'pw'; \
             GRANT ALL PRIVILEGES ON `gap\\_auditor\\_test%`.* TO '{name}'@'127.0.0.1';"
        ));
        User(name)
    }

    fn url(&self) -> String {
        let base = mysql_url();
        let (_, rest) = base.split_once('@').expect("user@ in the test MySQL url");
        format!("mysql://{}:pw@{rest}", self.0)
    }
}

impl Drop for User {
    fn drop(&mut self) {
        mariadb_root(&format!("DROP USER IF EXISTS '{}'@'127.0.0.1'", self.0));
    }
}

/// A session whose character set is GBK (`init_connect`, for one dedicated user only:
/// other users' sessions are set to their own values, unchanged): the auditor's UTF-8
/// literals would be read as GBK — non-ASCII keys never match, and backslash escaping is
/// unsound. The verifier switches such a session to utf8mb4 before sending any literal, so
/// the key is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_utf8_session_is_switched_to_utf8mb4() {
    let _server = SERVER.lock().await;
    let user = User::create("gacs");
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_cs");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (k VARCHAR(80) COLLATE utf8mb4_bin) DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    let value = "Zürich\\縗'é";
    c.exec_drop(format!("INSERT INTO `{table}` VALUES (?)"), (value,))
        .await
        .expect("insert");
    let me = format!("SUBSTRING_INDEX(USER(),'@',1) = '{}'", user.0);
    let init = format!(
        "SET character_set_client = IF({me}, 'gbk', @@character_set_client), \
         character_set_connection = IF({me}, 'gbk', @@character_set_connection), \
         character_set_results = IF({me}, 'gbk', @@character_set_results)"
    );
    let _init = Global::set("init_connect", &init);
    // The dedicated user's sessions really are GBK.
    let mut probe = mysql_async::Conn::from_url(user.url())
        .await
        .expect("probe");
    let cs: Option<String> = probe
        .query_first("SELECT @@character_set_connection")
        .await
        .expect("charset");
    assert_eq!(cs.as_deref(), Some("gbk"));
    probe.disconnect().await.expect("disconnect");
    let sink = sink_at(&user.url(), keys_target(&table));
    let key = Key::new([value]);
    for _ in 0..3 {
        assert_eq!(sink.count_keys(&[&key]).await.expect("count"), vec![1]);
    }
    sink.close().await;
    c.query_drop(format!("DROP TABLE `{table}`"))
        .await
        .expect("drop");
    drop(c);
    pool.disconnect().await.expect("disconnect");
}

// ---- TLS --------------------------------------------------------------------------------

fn tls_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run scripts/test.sh (it starts the TLS-only MariaDB)")
    })
}

/// A ping of the TLS-only server as `user` with `tls`.
async fn tls_ping(user: &str, tls: TlsSettings) -> Result<(), SinkError> {
    let url = tls_env("GAP_AUDITOR_TEST_MYSQL_TLS").replacen("//gap:", &format!("//{user}:"), 1);
    let sink = MysqlSink::new(
        &url,
        None,
        None,
        offsets_target("t"),
        Duration::from_secs(10),
        "mysql",
        &tls,
    )
    .expect("sink");
    let r = sink.ping().await;
    sink.close().await;
    r
}

fn tls(mode: SinkTls, ca: Option<&str>) -> TlsSettings {
    TlsSettings {
        mode,
        ca_file: ca.map(|v| PathBuf::from(tls_env(v))),
        ..TlsSettings::default()
    }
}

#[tokio::test]
async fn tls_verified_against_the_test_ca_connects() {
    for mode in [SinkTls::VerifyCa, SinkTls::VerifyIdentity] {
        tls_ping("gap", tls(mode, Some("GAP_AUDITOR_TEST_TLS_CA")))
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
}

#[tokio::test]
async fn tls_with_a_wrong_ca_fails_clearly() {
    for mode in [SinkTls::VerifyCa, SinkTls::VerifyIdentity] {
        let e = tls_ping("gap", tls(mode, Some("GAP_AUDITOR_TEST_TLS_OTHER_CA")))
            .await
            .expect_err("a certificate from another CA must be refused");
        let m = e.to_string();
        assert!(matches!(e, SinkError::Unavailable(_)), "{m}");
        assert!(m.contains("TLS handshake with the sink failed"), "{m}");
        assert!(m.contains("certificate verify failed"), "{m}");
    }
}

#[tokio::test]
async fn tls_required_connects_to_the_tls_only_server_without_a_ca() {
    tls_ping("gap", tls(SinkTls::Required, None))
        .await
        .expect("required: encrypted, not verified");
}

#[tokio::test]
async fn tls_disabled_against_the_tls_only_server_fails_clearly() {
    let e = tls_ping("gap", tls(SinkTls::Disabled, None))
        .await
        .expect_err("plain text must be refused by the TLS-only server");
    let m = e.to_string();
    assert!(matches!(e, SinkError::Rejected(_)), "{m}");
    assert!(m.contains("1045"), "{m}");
    assert!(m.contains("sink.tls is \"disabled\""), "{m}");
}

#[tokio::test]
async fn tls_client_certificate_is_presented() {
    let mut with_cert = tls(SinkTls::VerifyIdentity, Some("GAP_AUDITOR_TEST_TLS_CA"));
    with_cert.identity_file = Some(tls_env("GAP_AUDITOR_TEST_TLS_CLIENT_P12").into());
    with_cert.identity_password = Some(tls_env("GAP_AUDITOR_TEST_TLS_CLIENT_P12_PASSWORD"));
    tls_ping("gap_x509", with_cert)
        .await
        .expect("REQUIRE X509 with the client certificate");
    let e = tls_ping(
        "gap_x509",
        tls(SinkTls::VerifyIdentity, Some("GAP_AUDITOR_TEST_TLS_CA")),
    )
    .await
    .expect_err("REQUIRE X509 without a client certificate");
    assert!(e.to_string().contains("1045"), "{e}");
}

/// From the config keys to the connection: `ca_file` alone means verify_identity.
#[tokio::test]
async fn tls_from_the_config() {
    let toml = format!(
        r#"
[kafka]
brokers = "127.0.0.1:1"
[[audits]]
name = "a"
topics = ["t"]
[audits.record]
format = "raw"
fields = ["v"]
[audits.match]
strategy = "offset_columns"
[audits.sink]
kind = "mysql"
url = "{url}"
table = "t"
ca_file = "{ca}"
"#,
        url = tls_env("GAP_AUDITOR_TEST_MYSQL_TLS"),
        ca = tls_env("GAP_AUDITOR_TEST_TLS_CA"),
    );
    let cfg = gap_auditor::config::Config::from_toml_str(&toml).expect("config");
    assert_eq!(cfg.audits[0].sink.tls_mode(), SinkTls::VerifyIdentity);
    let sink = gap_auditor::app::build_sink(&cfg.audits[0]).expect("sink");
    sink.ping().await.expect("TLS from sink.ca_file");
}

/// Issue 34 item 2: typed key columns. The sink reads each key column's type, precision and
/// scale ([`Verifier::key_domain`]), and converts every key value the way the column stores
/// it before the query, whichever form carries it: the text JOIN with a value list (a small
/// batch), the prepared JOIN (a full one), and Doris's `UNION ALL SELECT` rows. Rows are
/// written by the server's own conversion (one spelling), keys asked in another (as keys
/// restored from state written before the decoder converted them would be): every present
/// row is found under its key, and only the absent ones count 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_key_columns_are_compared_as_the_columns_store_them() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_typed");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (t DATETIME, d DECIMAL(6,2), n INT, KEY k (t, d, n)) \
         DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    let time = |i: usize, sep: char, frac: &str| {
        format!("2024-01-01{sep}10:{:02}:{:02}{frac}", i / 60, i % 60)
    };
    const KEYS: usize = 70;
    let absent = |i: usize| i % 10 == 3;
    for i in (0..KEYS).filter(|&i| !absent(i)) {
        c.exec_drop(
            format!("INSERT INTO `{table}` VALUES (?, ?, ?)"),
            (time(i, ' ', ".999"), format!("{i}.005"), format!("{i}.0")),
        )
        .await
        .expect("insert");
    }
    let keys: Vec<Key> = (0..KEYS)
        .map(|i| Key::new([time(i, 'T', ".5"), format!("+{i}.0050"), format!("{i}")]))
        .collect();
    let want: Vec<u64> = (0..KEYS).map(|i| u64::from(!absent(i))).collect();
    let target = |table: &str| {
        let mut t = keys_target(table);
        t.columns.key = vec!["t".into(), "d".into(), "n".into()];
        t
    };
    let mariadb = sink_at(&mysql_url(), target(&table));
    let doris = MysqlSink::new(
        &mysql_url(),
        None,
        None,
        target(&table),
        Duration::from_secs(10),
        "doris",
        &TlsSettings::default(),
    )
    .expect("sink");

    let domain = mariadb.key_domain().await.expect("read").expect("a domain");
    let described = domain.describe();
    assert!(described.contains("t datetime"), "{described}");
    assert!(described.contains("d decimal(6,2)"), "{described}");
    assert!(described.contains("truncated"), "{described}");
    // Converting the asked spelling gives the stored one.
    assert_eq!(
        domain.key(&keys[1]).expect("converts"),
        Some(Key::new(["2024-01-01 10:00:01", "1.01", "1"]))
    );

    let all: Vec<&Key> = keys.iter().collect();
    let small: Vec<&Key> = keys.iter().take(12).collect();
    assert_eq!(mariadb.count_keys(&all).await.expect("prepared"), want);
    assert_eq!(
        mariadb.count_keys(&small).await.expect("text"),
        want[..12].to_vec()
    );
    // The kind `doris` converts as Doris stores (fractions rounded); MariaDB, standing in
    // for it here, truncated the rows on INSERT. Asked with fractions below the half, the
    // two rules agree, so what this checks is Doris's query form.
    let doris_keys: Vec<Key> = (0..KEYS)
        .map(|i| Key::new([time(i, 'T', ".4"), format!("+{i}.0050"), format!("{i}")]))
        .collect();
    let doris_all: Vec<&Key> = doris_keys.iter().collect();
    assert_eq!(doris.count_keys(&doris_all).await.expect("doris"), want);
    mariadb.close().await;
    doris.close().await;
    c.query_drop(format!("DROP TABLE `{table}`"))
        .await
        .expect("drop");
    drop(c);
    pool.disconnect().await.expect("disconnect");
}

/// Issue 34 item 6: a batch holding a key of another arity than the key columns (a key
/// stored before `match.key` changed) cannot be built. It used to be sent as a query that
/// selects nothing, every key of the batch counted 0 (the debug assertion that says so is
/// skipped in release builds): now an error naming the arity, never zeros.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_arity_is_an_error_not_zero_rows() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_arity");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (k VARCHAR(80) COLLATE utf8mb4_nopad_bin) \
         DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    c.query_drop(format!("INSERT INTO `{table}` VALUES ('a')"))
        .await
        .expect("insert");
    let sink = sink_at(&mysql_url(), keys_target(&table));
    let (a, old) = (Key::new(["a"]), Key::new(["a", "x"]));
    assert_eq!(sink.count_keys(&[&a]).await.expect("one column"), vec![1]);
    let e = rejected(sink.count_keys(&[&a, &old]).await);
    assert!(
        e.contains("a key of 2 values does not fit the 1 key columns"),
        "{e}"
    );
}

/// Issue 34 item 4: the look at an offset_columns table without a topic column, one
/// statement: the partition range of every row and the largest offset per partition asked
/// (`None` where a partition has no row), as the rows say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offset_extent_is_the_partition_range_and_each_partitions_largest_offset() {
    let _server = SERVER.lock().await;
    let pool = setup_pool();
    let mut c = pool.get_conn().await.expect("conn");
    let table = unique("sink_extent");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (`partition` INT, `offset` BIGINT, KEY po (`partition`, `offset`))"
    ))
    .await
    .expect("create");
    let sink = sink_at(&mysql_url(), offsets_target(&table));
    let empty = sink.offset_extent(&[0, 1]).await.expect("extent");
    assert_eq!(
        empty,
        Some(OffsetExtent {
            partitions: None,
            max_offsets: vec![(0, None), (1, None)],
        })
    );
    c.query_drop(format!(
        "INSERT INTO `{table}` VALUES (0, 3), (0, 19), (1, 4), (7, 1), (NULL, 99)"
    ))
    .await
    .expect("insert");
    let x = sink.offset_extent(&[0, 1, 2]).await.expect("extent");
    assert_eq!(
        x,
        Some(OffsetExtent {
            partitions: Some((0, 7)),
            max_offsets: vec![(0, Some(19)), (1, Some(4)), (2, None)],
        })
    );
    let mut with_topic = offsets_target(&table);
    with_topic.columns.topic = Some("topic".into());
    let none = sink_at(&mysql_url(), with_topic).offset_extent(&[0]).await;
    assert_eq!(
        none.expect("not asked"),
        None,
        "a topic column needs no look"
    );
}
