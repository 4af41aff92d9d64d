//! Security (issue 8): no secret reaches the logs, `/api/status`, `/api/gaps`, `/metrics`
//! or a config error, and `server.api_token` guards `/api/*` of the real binary.
//!
//! The daemon runs with a known, distinctive secret in every slot the configuration has —
//! the MySQL password in the sink URL, the Elasticsearch password in its URL, an
//! Elasticsearch API key, a librdkafka `sasl.password` (with librdkafka's own `debug=conf`
//! logging on, which dumps the client configuration), and the API token (from the
//! environment) — under `GAP_AUDITOR_LOG=debug` (and `RUST_LOG=debug`), against the real Kafka broker, MariaDB and OpenSearch. One
//! audit's sink refuses the login (wrong password), so the error paths log too. Every
//! secret, and the Base64 forms that would appear if an `Authorization` header were logged,
//! is then searched for in stdout, stderr and every HTTP answer.
//!
//! Needs the services of scripts/test.sh, plus MariaDB's root login over its socket
//! (`GAP_AUDITOR_TEST_MYSQL_SOCKET`, the `mariadb` client) to create a user with a password
//! of our own: the shared test user's password (`gap`) is too common a string to search for.

#[path = "it/figures.rs"]
mod figures;
#[path = "it/support.rs"]
mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MYSQL_PW: &str = "MysqlPw-7f3a9c1e";
const MYSQL_BAD_PW: &str = "WrongPw-0d8e2b44";
const ES_PW: &str = "EsPw-5b1c7e90";
const ES_API_KEY: &str = "EsApiKey-2a6f4d18";
const SASL_PW: &str = "SaslPw-9e4b3a77";
const API_TOKEN: &str = "ApiToken-c81f05d2";

/// Every secret the tests plant, with how it could leak in another spelling.
fn needles() -> Vec<String> {
    let mut out: Vec<String> = [
        MYSQL_PW,
        MYSQL_BAD_PW,
        ES_PW,
        ES_API_KEY,
        SASL_PW,
        API_TOKEN,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // An Authorization: Basic header, should one be logged.
    out.push(base64(&format!("elastic:{ES_PW}")));
    out
}

/// Standard Base64 with padding (RFC 4648), enough for a needle.
fn base64(s: &str) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | (x as u32) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Fails with the place and a window of text around the first secret found in `text`.
fn assert_no_secret(place: &str, text: &str) {
    for needle in needles() {
        if let Some(at) = text.find(&needle) {
            let from = text.floor_char_boundary(at.saturating_sub(300));
            let to = text.ceil_char_boundary((at + needle.len() + 300).min(text.len()));
            panic!(
                "secret {needle:?} found in {place}:\n...{}...",
                &text[from..to]
            );
        }
    }
}

/// Runs SQL as MariaDB's root over the server's socket (root logs in by unix_socket).
fn mariadb_root(sql: &str) {
    let socket = std::env::var("GAP_AUDITOR_TEST_MYSQL_SOCKET").expect(
        "GAP_AUDITOR_TEST_MYSQL_SOCKET is not set: run scripts/test.sh (it starts MariaDB)",
    );
    let out = Command::new("mariadb")
        .args(["--no-defaults", "--socket", &socket, "-uroot", "-e", sql])
        .output()
        .expect("the mariadb client runs");
    assert!(
        out.status.success(),
        "mariadb -uroot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A MariaDB user with password [`MYSQL_PW`] and the test user's rights; dropped on drop.
struct SecretUser(String);

impl SecretUser {
    fn create() -> SecretUser {
        let name = format!("gasec{}", std::process::id());
        mariadb_root(&format!(
            "DROP USER IF EXISTS '{name}'@'127.0.0.1'; \
             CREATE USER '{name}'@'127.0.0.1' IDENTIFIED BY '{MYSQL_PW}'; \
             GRANT ALL PRIVILEGES ON `gap\\_auditor\\_test%`.* TO '{name}'@'127.0.0.1';"
        ));
        SecretUser(name)
    }
}

impl Drop for SecretUser {
    fn drop(&mut self) {
        mariadb_root(&format!("DROP USER IF EXISTS '{}'@'127.0.0.1'", self.0));
    }
}

/// One GET with optional bearer token; (status, head, body). Bodies are small and not
/// chunked except JSON, which [`http_get`]'s de-chunking handles; here the raw text is what
/// is searched, so framing does not matter.
async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n").as_bytes(),
    )
    .await
    .expect("write");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("answer in time")
        .expect("read");
    // /api/gaps streams its list chunked: the body is searched as the client reads it.
    let (head, body) = head_and_body(&buf);
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, head, body)
}

fn config(s: &Scenario, user: &str, index: &str, listen: SocketAddr) -> String {
    let mysql = mysql_url();
    let (_, rest) = mysql.split_once('@').expect("user@ in the test MySQL url");
    let ok_url = format!("mysql://{user}:{MYSQL_PW}@{rest}");
    let bad_url = format!("mysql://{user}:{MYSQL_BAD_PW}@{rest}");
    let es = std::env::var("GAP_AUDITOR_TEST_ES")
        .expect("GAP_AUDITOR_TEST_ES is not set: run scripts/test.sh (it starts OpenSearch)");
    let es_basic = es.replacen("://", &format!("://elastic:{ES_PW}@"), 1);
    // Every audit reads the same records; only its sink and credentials differ.
    let audit = |name: &str| {
        AuditToml::new(name, &[s.topic.as_str()])
            .set("grace", "1s")
            .set("verify_interval", "300ms")
            .seed_csv()
    };
    ConfigToml::new(&kafka())
        .test_group(&s.auditor_group)
        .kafka("statistics_interval", "500ms")
        .kafka_property("sasl.username", "auditor")
        .kafka_property("sasl.password", SASL_PW)
        .kafka_property("debug", "conf,generic")
        .server("listen", listen.to_string())
        .state_path(s.state.path())
        .audit(
            audit("mysql_ok")
                .strategy("offset_columns")
                .sql_sink("mysql", &ok_url, &s.table)
                .sink("query_timeout", "3s"),
        )
        .audit(
            audit("mysql_bad_login")
                .strategy("offset_columns")
                .sql_sink("mysql", &bad_url, &s.table)
                .sink("query_timeout", "3s"),
        )
        .audit(
            audit("es_basic")
                .strategy("doc_id")
                .es_sink(&es_basic, index),
        )
        .audit(
            audit("es_api_key")
                .strategy("doc_id")
                .es_sink(&es, index)
                .sink("api_key", ES_API_KEY),
        )
        .render()
}

/// The audit named `name` in an `/api/status` answer.
fn audit<'a>(status: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    status["audits"]
        .as_array()?
        .iter()
        .find(|a| a["audit"] == name)
}

/// The end-to-end leak search described in the module docs. Also proves the run did what
/// it must for the search to mean anything: the good MySQL audit found its gap (so the
/// password worked), the bad one reported the refused login, debug logging was on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_in_logs_api_or_metrics() {
    let user = SecretUser::create();
    let s = Scenario::new("sec").await;
    let index = unique("sec_idx").to_lowercase();
    let es = std::env::var("GAP_AUDITOR_TEST_ES").expect("GAP_AUDITOR_TEST_ES");
    let created = reqwest::Client::new()
        .put(format!("{es}/{index}"))
        .send()
        .await
        .expect("create the index");
    assert!(created.status().is_success(), "{:?}", created.text().await);

    let lines = dns_lines(0..6);
    assert_eq!(s.send(&lines).await, (0..6).collect::<Vec<i64>>());
    for (o, line) in lines.iter().enumerate().take(3) {
        s.db.insert_line(&s.table, line.as_bytes(), 0, o as i64)
            .await;
    }

    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("gap-auditor.toml");
    std::fs::write(&cfg, config(&s, &user.0, &index, listen)).expect("write config");
    let stdout = dir.path().join("stdout");
    let stderr = dir.path().join("stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["run", "-c"])
        .arg(&cfg)
        // The daemon's own filter variable, and RUST_LOG for any library reading it.
        .env("GAP_AUDITOR_LOG", "debug")
        .env("RUST_LOG", "debug")
        .env("GAP_AUDITOR__SERVER__API_TOKEN", API_TOKEN)
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr).expect("stderr file"))
        .spawn()
        .expect("spawn gap-auditor");
    let log = || {
        format!(
            "{}\n{}",
            std::fs::read_to_string(&stdout).unwrap_or_default(),
            std::fs::read_to_string(&stderr).unwrap_or_default()
        )
    };

    // Wait for: the gap of mysql_ok (offsets 3..=5), the refused login of mysql_bad_login,
    // and both ES audits having asked their sink.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut answers = Vec::new();
    loop {
        let done = match tokio::net::TcpStream::connect(listen).await {
            Err(_) => false,
            Ok(_) => {
                let (_, _, status) = get(listen, "/api/status", Some(API_TOKEN)).await;
                let (_, _, gaps) = get(listen, "/api/gaps?state=all", Some(API_TOKEN)).await;
                let v: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
                let bad_refused = audit(&v, "mysql_bad_login").is_some_and(|a| {
                    a["sink_error"]
                        .as_str()
                        .is_some_and(|e| e.contains("Access denied"))
                });
                let es_asked = ["es_basic", "es_api_key"]
                    .iter()
                    .all(|n| audit(&v, n).is_some_and(|a| !a["last_sink_ok"].is_null()));
                let gap_found = gaps.contains("\"audit\":\"mysql_ok\"");
                answers = vec![status, gaps];
                bad_refused && es_asked && gap_found
            }
        };
        if done {
            break;
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run never got there: {answers:?}\nlog:\n{}", log());
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let gaps: Vec<serde_json::Value> = serde_json::from_str(&answers[1]).expect("gaps JSON");
    let mine: Vec<_> = gaps.iter().filter(|g| g["audit"] == "mysql_ok").collect();
    assert_eq!(mine.len(), 1, "{gaps:?}");
    assert_eq!(
        (
            mine[0]["first_offset"].as_i64(),
            mine[0]["last_offset"].as_i64()
        ),
        (Some(3), Some(5))
    );

    // Everything the HTTP server says, authorized or not.
    for (path, token) in [
        ("/api/status", Some(API_TOKEN)),
        ("/api/gaps?state=all", Some(API_TOKEN)),
        ("/api/status", None),
        ("/api/status", Some("wrong")),
        ("/metrics", None),
        ("/readyz", None),
        ("/healthz", None),
    ] {
        let (code, head, body) = get(listen, path, token).await;
        if path.starts_with("/api/") {
            let want = if token == Some(API_TOKEN) { 200 } else { 401 };
            assert_eq!(code, want, "{path} with {token:?}: {body}");
        }
        assert_no_secret(
            &format!("GET {path} ({token:?})"),
            &format!("{head}\n{body}"),
        );
        answers.push(body);
    }

    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill -TERM");
    assert!(st.success());
    let code = child.wait().expect("wait");
    let text = log();
    assert!(code.success(), "SIGTERM exits 0: {code:?}\n{text}");
    // The search means something only if the debug output is there.
    assert!(
        text.contains("DEBUG"),
        "RUST_LOG=debug took effect:\n{text}"
    );
    assert!(
        text.contains("librdkafka"),
        "librdkafka's own logs were forwarded"
    );
    assert!(
        text.contains("Access denied"),
        "the refused login was logged"
    );
    assert_no_secret("stdout/stderr of `run`", &text);

    // The one-shot `check` over the same config: its report, its errors (the refused
    // login ends it with exit 2) and its debug log.
    let mut checked = 0;
    for (name, want) in [
        ("mysql_ok", 1),
        ("mysql_bad_login", 2),
        ("es_basic", 1),
        ("es_api_key", 1),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(["check", "-c"])
            .arg(&cfg)
            .args(["--audit", name, "--from", "offset:0", "--to", "offset:6"])
            .env("GAP_AUDITOR_LOG", "debug")
            .env("GAP_AUDITOR__SERVER__API_TOKEN", API_TOKEN)
            .stdin(Stdio::null())
            .output()
            .expect("run check");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.code(),
            Some(want),
            "check --audit {name}: {text}"
        );
        assert_no_secret(&format!("check --audit {name}"), &text);
        checked += text.len();
    }
    figures::record(&figures::Figures {
        scenario: "secrets_never_leak_run",
        runs: 1,
        faults: needles().len() as u32,
        expected_lost: 3,
        reported_lost: mine[0]["missing_records"].as_u64().unwrap_or(0),
        expected_gaps: 1,
        reported_gaps: mine.len() as u64,
        false_positives: 0,
        false_negatives: 0,
        notes: format!(
            "{} secrets (MySQL/ES passwords in URLs, ES api_key, sasl.password, API token, \
             Basic-auth form) searched in {} bytes of debug logs of `run`, {} HTTP answers and \
             {checked} bytes of `check` output: 0 found; one sink refused the login",
            needles().len(),
            text.len(),
            answers.len()
        ),
    });
    eprintln!(
        "searched {} bytes of logs and {} HTTP answers for {} secrets: none found",
        text.len(),
        answers.len(),
        needles().len()
    );
}

/// `validate-config` on configs that fail, each holding every secret: the errors name the
/// key and never echo a value, including a TOML syntax error on the line of a secret
/// (parsers quote the offending line).
#[test]
fn validate_config_errors_do_not_echo_secrets() {
    let good = ConfigToml::new("127.0.0.1:9092")
        .kafka_property("sasl.password", SASL_PW)
        .server("api_token", API_TOKEN)
        .audit(
            AuditToml::new("a", &["t"])
                .record("fields", ["a", "b"])
                .strategy("offset_columns")
                .sql_sink(
                    "mysql",
                    &format!("mysql://u:{MYSQL_PW}@127.0.0.1:3306/db"),
                    "t",
                ),
        )
        .audit(
            AuditToml::new("b", &["t"])
                .record("format", "json")
                .strategy("doc_id")
                .es_sink(&format!("http://elastic:{ES_PW}@127.0.0.1:9200"), "i"),
        )
        .render();
    let cases: Vec<(String, &str)> = vec![
        // A syntax error on the line of the password.
        (
            good.replace(
                &format!("url = \"mysql://u:{MYSQL_PW}"),
                &format!("url = mysql://u:{MYSQL_PW}"),
            ),
            "gap-auditor.toml",
        ),
        // An unterminated string holding the token.
        (
            good.replace(
                &format!("api_token = \"{API_TOKEN}\""),
                &format!("api_token = \"{API_TOKEN}"),
            ),
            "gap-auditor.toml",
        ),
        // A wrong type where a secret goes.
        (
            good.replace(
                &format!("api_token = \"{API_TOKEN}\""),
                &format!("api_token = [\"{API_TOKEN}\"]"),
            ),
            "server.api_token",
        ),
        // Validation errors in the entries holding secrets.
        (good.replace("mysql://u:", "ftp://u:"), "audits[0].sink.url"),
        (
            good.replace(
                "index = \"i\"",
                &format!("index = \"i\"\napi_key = \"{ES_API_KEY}\""),
            ),
            "audits[1].sink.api_key",
        ),
        (
            good.replace(
                "[server]",
                &format!("\"group.id\" = \"{SASL_PW}\"\n[server]"),
            ),
            "kafka.properties[\"group.id\"]",
        ),
        (
            good.replace(API_TOKEN, &format!("{API_TOKEN} with spaces")),
            "server.api_token",
        ),
        (
            good.replace(
                "table = \"t\"",
                &format!("table = \"t\"\npassword = \"{MYSQL_BAD_PW}\""),
            ),
            "audits[0].sink.password",
        ),
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, (toml, key)) in cases.into_iter().enumerate() {
        let path = dir.path().join("gap-auditor.toml");
        std::fs::write(&path, &toml).expect("write");
        let out = validate(&path, &[]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "case {i} must fail: {text}");
        assert!(text.contains(key), "case {i}: `{key}` not named in: {text}");
        assert_no_secret(&format!("validate-config case {i}"), &text);
    }
    // The same secrets from the environment, with an invalid value next to them.
    let path = dir.path().join("gap-auditor.toml");
    std::fs::write(&path, &good).expect("write");
    let out = validate(
        &path,
        &[
            (
                "GAP_AUDITOR__SERVER__API_TOKEN",
                format!("{API_TOKEN}\u{e9}"),
            ),
            (
                "GAP_AUDITOR__AUDITS__1__SINK__API_KEY",
                ES_API_KEY.to_string(),
            ),
        ],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("server.api_token"), "{text}");
    assert_no_secret("validate-config with secrets in the environment", &text);
    // And the valid config passes without printing any of them.
    let out = validate(&path, &[]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert_no_secret("validate-config OK", &text);
}

fn validate(path: &Path, env: &[(&str, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["validate-config", "-c"])
        .arg(path)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("GAP_AUDITOR_LOG", "debug")
        .stdin(Stdio::null())
        .output()
        .expect("run validate-config")
}

#[test]
fn base64_matches_rfc4648() {
    assert_eq!(base64(""), "");
    assert_eq!(base64("f"), "Zg==");
    assert_eq!(base64("fo"), "Zm8=");
    assert_eq!(base64("foo"), "Zm9v");
    assert_eq!(base64("foobar"), "Zm9vYmFy");
    assert_eq!(base64("elastic:changeme"), "ZWxhc3RpYzpjaGFuZ2VtZQ==");
}
