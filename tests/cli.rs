//! The command line as an operator meets it: exit codes, messages naming the bad key,
//! secrets kept out of errors, and `gaps`/`ack` on a store shared with a running daemon.
//! No external service needed.

#[path = "support/fixtures.rs"]
mod fixtures;

use gap_auditor::gap::GapState;
use gap_auditor::store::Store;
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gap-auditor"));
    // Overrides from the developer's shell must not leak into these tests.
    for (k, _) in std::env::vars() {
        if k.starts_with("GAP_AUDITOR__") {
            c.env_remove(k);
        }
    }
    c.env_remove("GAP_AUDITOR_CONFIG");
    c
}

fn run(c: &mut Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("run gap-auditor");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/gap-auditor.toml");

#[test]
fn validate_config_accepts_the_documented_example() {
    let (code, out, err) = run(bin().args(["validate-config", "-c", EXAMPLE]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("dns_logs"), "{out}");
}

#[test]
fn validate_config_names_the_bad_key_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(EXAMPLE).expect("example").replace(
        "mysql://root@127.0.0.1:9030/example_db",
        "ftp://root:hunter2@db:9030/example_db",
    );
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, text).expect("write");
    let (code, out, err) = run(bin().args(["validate-config", "-c"]).arg(&path));
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("audits[0].sink.url: scheme must be mysql, http or https"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2") && !out.contains("hunter2"),
        "secret leaked: {err}"
    );
}

/// Issue 34 item 4: two offset_columns audits, topics `test` and `other`, one sink table,
/// no `topic_column`: `other`'s row at (0, 5) would confirm `test`'s lost record there.
/// Refused at validation with exit 2, naming the key to add (before: accepted).
#[test]
fn two_offset_audits_on_one_table_without_a_topic_column_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = |name: &str, topic: &str| {
        format!(
            "[[audits]]\nname = \"{name}\"\ntopics = [\"{topic}\"]\n[audits.record]\n\
             format = \"raw\"\n[audits.match]\nstrategy = \"offset_columns\"\n\
             [audits.sink]\nkind = \"doris\"\nurl = \"mysql://root@doris-fe:9030/example_db\"\n\
             table = \"dns_logs\"\n"
        )
    };
    let text = format!(
        "[kafka]\nbrokers = \"127.0.0.1:9092\"\n{}{}",
        audit("test_logs", "test"),
        audit("other_logs", "other")
    );
    let path = dir.path().join("shared.toml");
    std::fs::write(&path, &text).expect("write");
    let (code, out, err) = run(bin().args(["validate-config", "-c"]).arg(&path));
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("audits[0].match.topic_column: is required: audits[1] (`other_logs`"),
        "{err}"
    );
    // With the topic column on both, the same two audits are valid.
    let fixed = text.replace(
        "strategy = \"offset_columns\"\n",
        "strategy = \"offset_columns\"\ntopic_column = \"kafka_topic\"\n",
    );
    std::fs::write(&path, fixed).expect("write");
    let (code, out, err) = run(bin().args(["validate-config", "-c"]).arg(&path));
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn run_refuses_a_bad_config_with_exit_2() {
    let (code, _, err) = run(bin()
        .args(["run", "-c", EXAMPLE])
        .env("GAP_AUDITOR__AUDITS__0__GRACE", "soon"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("audits[0].grace"), "{err}");
}

#[test]
fn a_missing_config_file_is_an_error_not_a_default() {
    let (code, _, err) =
        run(bin().args(["validate-config", "-c", "/nonexistent/gap-auditor.toml"]));
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/gap-auditor.toml"), "{err}");
}

#[test]
fn gaps_and_ack_work_on_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let store = Store::open(&state).expect("store");
    let gap = fixtures::open_gap("dns_logs", "test", 2, 3);
    store.commit_round("dns_logs", &[gap], &[]).expect("commit");
    let env = ("GAP_AUDITOR__STATE__PATH", state.to_str().expect("utf8"));

    let (code, out, err) = run(bin().args(["gaps", "-c", EXAMPLE]).env(env.0, env.1));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("dns_logs:test:0:2") && out.contains("open"),
        "{out}"
    );

    let (code, out, _) = run(bin()
        .args(["gaps", "-c", EXAMPLE, "--format", "json"])
        .env(env.0, env.1));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v[0]["first_offset"], 2);
    assert_eq!(v[0]["missing_records"], 2);
    assert_eq!(v[0]["replayed_at"], serde_json::Value::Null);

    // A replayed gap shows when (still open: not confirmed yet).
    assert!(store.mark_replayed("dns_logs:test:0:2").expect("mark"));
    let at = store
        .get_gap("dns_logs:test:0:2")
        .expect("get")
        .and_then(|g| g.replayed_at)
        .expect("marked");
    let (_, out, _) = run(bin().args(["gaps", "-c", EXAMPLE]).env(env.0, env.1));
    assert!(out.contains("REPLAYED"), "{out}");
    assert!(
        out.contains(&at.format("%Y-%m-%d %H:%M:%S").to_string()),
        "{out}"
    );
    let (_, out, _) = run(bin()
        .args(["gaps", "-c", EXAMPLE, "--format", "json"])
        .env(env.0, env.1));
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert!(v[0]["replayed_at"].is_string(), "{v}");

    let (code, _, err) = run(bin()
        .args([
            "ack",
            "-c",
            EXAMPLE,
            "--gap",
            "dns_logs:test:0:2",
            "--reason",
            "replayed by hand",
        ])
        .env(env.0, env.1));
    assert_eq!(code, 0, "{err}");
    // The daemon's connection (still open here) sees the operator's change.
    let g = store
        .get_gap("dns_logs:test:0:2")
        .expect("get")
        .expect("gap");
    assert_eq!(g.state, GapState::Acknowledged);
    assert_eq!(g.ack_reason.as_deref(), Some("replayed by hand"));
    let (_, out, _) = run(bin().args(["gaps", "-c", EXAMPLE]).env(env.0, env.1));
    assert!(
        out.contains("no gaps"),
        "acknowledged gaps leave the open list: {out}"
    );

    let (code, _, err) = run(bin()
        .args(["ack", "-c", EXAMPLE, "--gap", "nope", "--reason", "x"])
        .env(env.0, env.1));
    assert_eq!(code, 2);
    assert!(err.contains("no gap with id"), "{err}");
}

/// `--help` teaches what an operator needs first: every command, every sink kind and
/// strategy, how the config is found, and an example.
#[test]
fn help_teaches_the_commands_sinks_and_strategies() {
    let (code, out, err) = run(bin().arg("--help"));
    assert_eq!(code, 0, "{err}");
    for c in [
        "run",
        "gaps",
        "ack",
        "validate-config",
        "config",
        "check",
        "replay",
        "wait",
        "demo",
    ] {
        assert!(
            out.contains(&format!("\n  {c} ")),
            "--help lists {c}: {out}"
        );
    }
    for word in [
        "Doris",
        "MySQL",
        "Elasticsearch",
        "doris ",
        "mysql ",
        "elasticsearch ",
        "offset_columns",
        "key_columns",
        "doc_id",
        "GAP_AUDITOR_CONFIG",
        "GAP_AUDITOR__SECTION__KEY",
        "GAP_AUDITOR_LOG_FORMAT=json",
        "Examples:",
        "gap-auditor run",
        "gap-auditor config schema",
        "docs/METRICS.md",
    ] {
        assert!(out.contains(word), "--help names {word:?}:\n{out}");
    }
    // The short help (-h) still names every sink kind and points at the long one.
    let (code, short, _) = run(bin().arg("-h"));
    assert_eq!(code, 0);
    for word in [
        "Doris",
        "MySQL",
        "Elasticsearch",
        "offset_columns",
        "--help",
    ] {
        assert!(short.contains(word), "-h names {word:?}:\n{short}");
    }
    // Every command takes the global -c.
    for c in [
        "run",
        "gaps",
        "check",
        "wait",
        "replay",
        "ack",
        "validate-config",
    ] {
        let (code, out, _) = run(bin().args([c, "--help"]));
        assert_eq!(code, 0);
        assert!(out.contains("-c, --config <FILE>"), "{c} --help:\n{out}");
    }
}

/// `config schema` reads no config (a broken one named with -c does not matter) and prints
/// the JSON Schema of the file; its help says what it is for.
#[test]
fn config_schema_prints_the_json_schema_without_reading_a_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "[kafka\n").expect("write");
    let (code, out, err) = run(bin().arg("-c").arg(&broken).args(["config", "schema"]));
    assert_eq!(code, 0, "{err}");
    let schema: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["additionalProperties"], false);
    for key in ["kafka", "server", "state", "audits"] {
        assert!(schema["properties"][key].is_object(), "{key}: {out}");
    }
    let (code, help, _) = run(bin().args(["config", "schema", "--help"]));
    assert_eq!(code, 0);
    for word in [
        "JSON Schema",
        "default",
        "values.schema.json",
        "validate-config",
    ] {
        assert!(
            help.contains(word),
            "config schema --help names {word:?}:\n{help}"
        );
    }
}

/// A copy of the example whose only audit is renamed, in a fresh directory: its name in
/// the output proves this file was read, and not ./config/gap-auditor.toml found by
/// default from the working directory.
fn renamed_example(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(EXAMPLE)
        .expect("example")
        .replace("name = \"dns_logs\"", &format!("name = \"{name}\""));
    assert!(text.contains(name), "the example's audit is named dns_logs");
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write");
    path
}

#[test]
fn config_flag_goes_before_or_after_the_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = renamed_example(dir.path(), "audit_from_flag");
    for args in [
        vec![
            "-c".into(),
            file.clone().into_os_string(),
            "validate-config".into(),
        ],
        vec![
            "validate-config".into(),
            "-c".into(),
            file.clone().into_os_string(),
        ],
        vec![
            "--config".into(),
            file.clone().into_os_string(),
            "validate-config".into(),
        ],
    ] {
        let (code, out, err) = run(bin().args(&args).current_dir(dir.path()));
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        assert!(out.contains("audit_from_flag"), "{args:?}: {out}");
    }
}

#[test]
fn gap_auditor_config_names_the_file_and_the_flag_wins_over_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let from_env = renamed_example(dir.path(), "audit_from_env");
    let from_flag = renamed_example(dir.path(), "audit_from_flag");
    let (code, out, err) = run(bin()
        .arg("validate-config")
        .env("GAP_AUDITOR_CONFIG", &from_env)
        .current_dir(dir.path()));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit_from_env"), "{out}");
    let (code, out, err) = run(bin()
        .args(["validate-config", "-c"])
        .arg(&from_flag)
        .env("GAP_AUDITOR_CONFIG", &from_env)
        .current_dir(dir.path()));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit_from_flag"), "{out}");
    // The variable reaches every command: `run` refuses the file it names.
    let (code, _, err) = run(bin()
        .arg("run")
        .env("GAP_AUDITOR_CONFIG", "/nonexistent/from-env.toml")
        .current_dir(dir.path()));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/nonexistent/from-env.toml"), "{err}");
}

/// `--version` names the commit, so an operator can tell which build runs. In a git
/// checkout (this test's case, and CI's) it must be a real commit of this repository, not
/// the `unknown` fallback.
#[test]
fn version_carries_the_git_revision() {
    let (code, out, err) = run(bin().arg("--version"));
    assert_eq!(code, 0, "{err}");
    let rev = gap_auditor::REVISION;
    // A plain `cargo build` embeds no SBOM, and says so (scripts/check-packaging.sh checks
    // the `cargo auditable` build's line and section).
    assert_eq!(
        out,
        format!(
            "gap-auditor {} (rev {rev}; SBOM: none)\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    let in_git = Command::new("git")
        .args(["rev-parse", "--git-dir"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .is_ok_and(|o| o.status.success());
    if in_git {
        assert_eq!(rev.len(), 12, "short=12 hash expected, got {rev:?}");
        let known = Command::new("git")
            .args(["cat-file", "-e", &format!("{rev}^{{commit}}")])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("git cat-file");
        assert!(known.success(), "{rev} is no commit of this repository");
    }
}

/// `replay --to-topic` for an Elasticsearch audit whose document ids are built from Kafka
/// coordinates (the default `{topic}+{partition}+{offset}`) is refused before anything is
/// read or connected (SPEC guarantee 11): exit 2, the template named, what to do instead.
/// `replay --help` teaches the rule and `--force`.
#[test]
fn replay_to_topic_is_refused_up_front_for_coordinate_doc_ids() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("es.toml");
    std::fs::write(
        &config,
        format!(
            "[kafka]\nbrokers = \"127.0.0.1:1\"\n[state]\npath = \"{}\"\n\
             [[audits]]\nname = \"es_logs\"\ntopics = [\"logs\"]\n[audits.record]\n\
             format = \"json\"\n[audits.match]\nstrategy = \"doc_id\"\n[audits.sink]\n\
             kind = \"elasticsearch\"\nurl = \"http://127.0.0.1:1\"\nindex = \"logs\"\n",
            dir.path().join("state").display()
        ),
    )
    .expect("config");
    let (code, out, err) = run(bin().arg("replay").arg("-c").arg(&config).args([
        "--audit",
        "es_logs",
        "--partition",
        "0",
        "--offsets",
        "2-3",
        "--to-topic",
        "repair",
    ]));
    assert_eq!(code, 2, "{out}{err}");
    for needle in [
        "refused for audit es_logs",
        "match.id_template `{topic}+{partition}+{offset}`",
        "the document id",
        "pipeline_maps_origin = true",
    ] {
        assert!(err.contains(needle), "`{needle}` not in {err}");
    }
    let (code, out, _) = run(bin().args(["replay", "--help"]));
    assert_eq!(code, 0);
    for needle in ["--force", "pipeline_maps_origin", "gap-auditor.origin"] {
        assert!(out.contains(needle), "replay --help names {needle}:\n{out}");
    }
}

/// Issue 37: SPEC's `[audits.pipeline]` table reaches `validate-config` (before: refused as
/// an unknown field): the long form of `pipeline_group` is valid, evidence keys nothing
/// reads are warned about by key, and `doris_routine_load` is accepted with its
/// own keys checked.
#[test]
fn validate_config_reports_the_pipeline_table_by_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let example = std::fs::read_to_string(EXAMPLE).expect("example");
    let without_group: String = example
        .lines()
        .filter(|l| !l.trim_start().starts_with("pipeline_group"))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.path().join("pipeline.toml");
    let with = |table: &str| {
        std::fs::write(
            &path,
            format!("{without_group}\n[audits.pipeline]\n{table}\n"),
        )
        .expect("write");
        run(bin().args(["validate-config", "-c"]).arg(&path))
    };
    // An evidence key nothing reads is a warning, not a refusal: the connector's name
    // without the Connect REST URL or a dead-letter topic.
    let (code, out, err) = with(
        "kind = \"kafka_group\"\ngroup = \"FlinkSQLFromKafka2Doris\"\nconnect_connector = \"es-sink\"",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains(
            "warning: audits[0].pipeline.connect_connector: is read only with connect_url"
        ),
        "{err}"
    );
    // The Kafka Connect evidence keys are read (issue 37): no warning with both; the URL
    // without the connector is refused with its key path.
    let (code, out, err) = with(
        "kind = \"kafka_group\"\ngroup = \"connect-es-sink\"\nconnect_url = \"http://connect:8083\"\nconnect_connector = \"es-sink\"",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    let (code, out, err) = with(
        "kind = \"kafka_group\"\ngroup = \"connect-es-sink\"\nconnect_url = \"http://connect:8083\"",
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("audits[0].pipeline.connect_connector: is required with connect_url"),
        "{err}"
    );
    // The Flink evidence keys are read (issue 37): no warning; one without the other is
    // refused with its key path.
    let (code, out, err) = with(
        "kind = \"kafka_group\"\ngroup = \"FlinkSQLFromKafka2Doris\"\nflink_rest_url = \"http://jobmanager:8081\"\nflink_job = \"FlinkSQLFromKafka2Doris\"",
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    let (code, out, err) = with(
        "kind = \"kafka_group\"\ngroup = \"FlinkSQLFromKafka2Doris\"\nflink_rest_url = \"http://jobmanager:8081\"",
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("audits[0].pipeline.flink_job: is required with flink_rest_url"),
        "{err}"
    );
    let (code, out, err) = with(
        "kind = \"doris_routine_load\"\nurl = \"mysql://auditor@doris-fe:9030/example_db\"\njob = \"dns_logs_load\"",
    );
    assert_eq!(code, 0, "a Routine Load position is accepted: {out}{err}");
    let (code, out, err) = with("kind = \"doris_routine_load\"\njob = \"dns_logs_load\"");
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("audits[0].pipeline.url: is required for kind = \"doris_routine_load\""),
        "{err}"
    );
}
