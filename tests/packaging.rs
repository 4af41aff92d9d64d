//! Packaging and operator docs that cannot rot: the Dockerfile's COPY sources exist and its
//! HEALTHCHECK really answers against the daemon, the compose / Kubernetes / systemd files
//! parse and carry the fields the deployment relies on, and every configuration an
//! operator is told to copy — the docs' ```` ```toml gap-auditor ```` blocks, the compose
//! config, the Kubernetes ConfigMap — passes `gap-auditor validate-config`.
//!
//! Tools that lint these files properly (hadolint, `docker compose config`,
//! kubernetes-validate, systemd-analyze, promtool, amtool) run in
//! `scripts/check-packaging.sh`; this test needs nothing but the built binary.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use yaml_rust2::{Yaml, YamlLoader};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_gap-auditor");

fn root() -> PathBuf {
    PathBuf::from(ROOT)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

// ---------------------------------------------------------------------------------------
// Dockerfile
// ---------------------------------------------------------------------------------------

/// The Dockerfile's instructions with `\` continuations joined and comments dropped.
fn dockerfile_instructions() -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in read("Dockerfile").lines() {
        let t = line.trim();
        if current.is_empty() && (t.is_empty() || t.starts_with('#')) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(t);
            out.push(std::mem::take(&mut current));
        }
    }
    out
}

/// The `.dockerignore` patterns (simple ones: a name or `**/name`).
fn dockerignore() -> Vec<String> {
    read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_start_matches("**/").trim_end_matches('/').to_owned())
        .collect()
}

#[test]
fn every_dockerfile_copy_source_exists_in_the_build_context() {
    let ignored = dockerignore();
    let mut checked = 0;
    for ins in dockerfile_instructions() {
        let mut words = ins.split_whitespace();
        let Some(op) = words.next() else { continue };
        if !op.eq_ignore_ascii_case("COPY") && !op.eq_ignore_ascii_case("ADD") {
            continue;
        }
        let args: Vec<&str> = words.collect();
        if args.iter().any(|a| a.starts_with("--from=")) {
            continue; // from another stage, not from the context
        }
        let paths: Vec<&str> = args.into_iter().filter(|a| !a.starts_with("--")).collect();
        assert!(
            paths.len() >= 2,
            "COPY without source and destination: {ins}"
        );
        for src in &paths[..paths.len() - 1] {
            if *src == "." {
                checked += 1;
                continue;
            }
            let rel = src.trim_end_matches('/');
            assert!(root().join(rel).exists(), "{ins}: {src} does not exist");
            let first = rel.split('/').next().unwrap_or(rel);
            assert!(
                !ignored.iter().any(|p| p == first || p == rel),
                "{ins}: {src} is excluded by .dockerignore"
            );
            checked += 1;
        }
    }
    // The planner/builder `COPY . .` plus the config and dashboard copies of the runtime.
    assert!(
        checked >= 4,
        "only {checked} COPY sources found: parser broken?"
    );
}

#[test]
fn dockerfile_keeps_the_runtime_contract() {
    let ins = dockerfile_instructions();
    let has = |want: &str| ins.iter().any(|i| i == want);
    for want in [
        "EXPOSE 9464",
        "ENTRYPOINT [\"gap-auditor\"]",
        "CMD [\"run\", \"-c\", \"/etc/gap-auditor/gap-auditor.toml\"]",
        "ARG GAP_AUDITOR_GIT_REV=unknown",
        "COPY config/gap-auditor.toml /etc/gap-auditor/gap-auditor.toml",
    ] {
        assert!(has(want), "Dockerfile lacks `{want}`");
    }
    // The release binary carries its SBOM (issue 38): built by cargo auditable, and the
    // build fails if --version does not say so.
    assert!(
        ins.iter()
            .any(|i| i.starts_with("RUN cargo auditable build --release")
                && i.contains("SBOM: cargo-auditable")),
        "the image's binary is not built with `cargo auditable build` (no SBOM)"
    );
    let runtime_from = ins
        .iter()
        .rposition(|i| i.starts_with("FROM "))
        .expect("a FROM");
    assert!(
        ins[runtime_from].contains("debian:") && ins[runtime_from].contains("-slim"),
        "runtime stage is not Debian slim: {}",
        ins[runtime_from]
    );
    let user = ins[runtime_from..]
        .iter()
        .filter_map(|i| i.strip_prefix("USER "))
        .next_back()
        .expect("the runtime stage sets USER");
    assert!(
        !user.starts_with("root") && !user.starts_with("0"),
        "runs as root: USER {user}"
    );
    assert!(
        ins[runtime_from..]
            .iter()
            .any(|i| i.starts_with("VOLUME") && i.contains("/var/lib/gap-auditor")),
        "the store is not a volume"
    );
}

/// The HEALTHCHECK's `CMD [...]` as an argv.
fn healthcheck_argv() -> Vec<String> {
    let ins = dockerfile_instructions();
    let hc = ins
        .iter()
        .find(|i| i.starts_with("HEALTHCHECK"))
        .expect("a HEALTHCHECK");
    let json = &hc[hc.find("CMD [").expect("exec-form CMD") + 4..];
    serde_json::from_str(json).unwrap_or_else(|e| panic!("HEALTHCHECK CMD is no JSON array: {e}"))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Runs the Dockerfile's own HEALTHCHECK command (bash + /dev/tcp, as in the slim image)
/// with its port replaced.
fn healthcheck(port: u16) -> bool {
    let argv: Vec<String> = healthcheck_argv()
        .into_iter()
        .map(|a| a.replace("/9464", &format!("/{port}")))
        .collect();
    assert!(argv.iter().any(|a| a.contains("/healthz")), "{argv:?}");
    Command::new(&argv[0])
        .args(&argv[1..])
        .stderr(Stdio::null())
        .status()
        .expect("run the healthcheck")
        .success()
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dockerfile_healthcheck_answers_only_while_the_daemon_runs() {
    let port = free_port();
    assert!(!healthcheck(port), "healthy with nothing listening");

    // Kafka and the sink unreachable: /healthz must still say the process runs.
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("hc.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[kafka]
brokers = "127.0.0.1:1"
[server]
listen = "127.0.0.1:{port}"
[state]
path = "{state}"
[[audits]]
name = "hc"
topics = ["t"]
[audits.record]
format = "raw"
[audits.match]
strategy = "offset_columns"
[audits.sink]
kind = "mysql"
url = "mysql://root@127.0.0.1:1/db"
table = "t"
"#,
            state = dir.path().join("state").display()
        ),
    )
    .expect("write config");
    let _daemon = Daemon(
        clean_env(&mut Command::new(BIN))
            .args(["run", "-c"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn gap-auditor run"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !healthcheck(port) {
        assert!(Instant::now() < deadline, "HEALTHCHECK never passed");
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------------------
// YAML helpers
// ---------------------------------------------------------------------------------------

fn yaml_docs(rel: &str) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(rel))
        .unwrap_or_else(|e| panic!("{rel} is not YAML: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn s<'a>(y: &'a Yaml, what: &str) -> &'a str {
    y.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {y:?}"))
}

fn keys(y: &Yaml) -> BTreeSet<String> {
    y.as_hash()
        .map(|h| {
            h.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// docker compose
// ---------------------------------------------------------------------------------------

#[test]
fn compose_stack_has_every_service_with_healthchecks_and_existing_mounts() {
    let docs = yaml_docs("deploy/docker-compose.yml");
    assert_eq!(docs.len(), 1);
    let services = &docs[0]["services"];
    let names = keys(services);
    for want in [
        "kafka",
        "doris-fe",
        "doris-be",
        "elasticsearch",
        "prometheus",
        "alertmanager",
        "grafana",
        "gap-auditor",
        "producer",
    ] {
        assert!(names.contains(want), "no service {want}: {names:?}");
    }
    // Long-running services report their health (init jobs and the producer excepted).
    for name in &names {
        let svc = &services[name.as_str()];
        assert!(
            svc["image"].as_str().is_some() || !svc["build"].is_badvalue(),
            "{name}: no image or build"
        );
        let oneshot = svc["restart"].as_str() == Some("no");
        if !oneshot && name != "producer" && name != "gap-auditor" {
            assert!(
                !svc["healthcheck"]["test"].is_badvalue(),
                "{name}: no healthcheck"
            );
        }
        for v in svc["volumes"].as_vec().into_iter().flatten() {
            let spec = s(v, "volume");
            if spec.starts_with('.') {
                let src = spec.split(':').next().unwrap_or(spec);
                let path = root().join("deploy").join(src);
                assert!(path.exists(), "{name}: mount source {src} does not exist");
            }
        }
    }
    let kafka = &services["kafka"]["environment"];
    assert_eq!(
        kafka["KAFKA_PROCESS_ROLES"].as_str(),
        Some("broker,controller"),
        "Kafka runs in KRaft mode"
    );
    let auditor = &services["gap-auditor"];
    let context = root()
        .join("deploy")
        .join(s(&auditor["build"]["context"], "build.context"));
    assert!(
        context
            .join(s(&auditor["build"]["dockerfile"], "build.dockerfile"))
            .is_file(),
        "the auditor's Dockerfile is not where compose looks"
    );
    assert!(
        !auditor["build"]["args"]["GAP_AUDITOR_GIT_REV"].is_badvalue(),
        "the image would not know its revision"
    );
    // Grafana provisions the repository's dashboard, Prometheus loads its rules.
    let grafana: Vec<&str> = services["grafana"]["volumes"]
        .as_vec()
        .expect("grafana volumes")
        .iter()
        .map(|v| s(v, "volume"))
        .collect();
    assert!(
        grafana
            .iter()
            .any(|v| v.starts_with("../dashboards/gap-auditor.json:")),
        "{grafana:?}"
    );
    let prometheus: Vec<&str> = services["prometheus"]["volumes"]
        .as_vec()
        .expect("prometheus volumes")
        .iter()
        .map(|v| s(v, "volume"))
        .collect();
    assert!(
        prometheus
            .iter()
            .any(|v| v.starts_with("../config/alerts:")),
        "{prometheus:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------

fn k8s_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .expect("deploy/kubernetes")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml"))
        .map(|n| format!("deploy/kubernetes/{n}"))
        .collect();
    files.sort();
    files
}

/// Every gap-auditor container: probes through the named port 9464, liveness on /healthz;
/// readiness on /readyz in its own pod, but on /healthz beside a Flink JobManager (a pod is
/// Ready only when every container is: the auditor's view of Doris or Kafka must not take
/// the JobManager out of its Service).
fn check_auditor_container(file: &str, c: &Yaml) {
    let port = c["ports"]
        .as_vec()
        .into_iter()
        .flatten()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .unwrap_or_else(|| panic!("{file}: no port named metrics"));
    assert_eq!(port["containerPort"].as_i64(), Some(9464), "{file}");
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz"),
        "{file}: liveness"
    );
    let readiness = if file.ends_with("flink-sidecar.yaml") {
        "/healthz"
    } else {
        "/readyz"
    };
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some(readiness),
        "{file}: readiness"
    );
    let args: Vec<&str> = c["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|a| s(a, "arg"))
        .collect();
    assert_eq!(
        args,
        ["run", "-c", "/etc/gap-auditor/gap-auditor.toml"],
        "{file}"
    );
    assert_eq!(
        c["securityContext"]["allowPrivilegeEscalation"].as_bool(),
        Some(false),
        "{file}"
    );
}

/// The `job` label of the rules' gap_auditor:scrape_job recording rule: the scrape job
/// the alerts on `up` expect.
fn rules_scrape_job() -> String {
    let rules = yaml_docs("config/alerts/gap-auditor.rules.yml");
    rules[0]["groups"]
        .as_vec()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_vec().cloned().unwrap_or_default())
        .find(|r| r["record"].as_str() == Some("gap_auditor:scrape_job"))
        .and_then(|r| r["labels"]["job"].as_str().map(str::to_owned))
        .expect("a gap_auditor:scrape_job rule with a job label")
}

#[test]
fn kubernetes_manifests_have_the_required_fields() {
    let mut resources = Vec::new();
    for file in k8s_files() {
        for doc in yaml_docs(&file) {
            for key in ["apiVersion", "kind"] {
                s(&doc[key], &format!("{file}: {key}"));
            }
            resources.push((file.clone(), doc));
        }
    }
    let named = |kind: &str| -> BTreeSet<String> {
        resources
            .iter()
            .filter(|(_, d)| d["kind"].as_str() == Some(kind))
            .map(|(f, d)| s(&d["metadata"]["name"], &format!("{f}: metadata.name")).to_owned())
            .collect()
    };
    let config_maps = named("ConfigMap");
    let secrets = named("Secret");
    let claims = named("PersistentVolumeClaim");
    let (mut auditors, mut pod_monitors, mut prometheus_rules) = (0, 0, 0);
    for (file, doc) in &resources {
        match s(&doc["kind"], "kind") {
            "Kustomization" => {
                for r in doc["resources"].as_vec().expect("resources") {
                    let r = s(r, "resource");
                    assert!(
                        root().join("deploy/kubernetes").join(r).is_file(),
                        "{file}: {r} missing"
                    );
                }
            }
            "Deployment" => {
                let spec = &doc["spec"];
                let template = &spec["template"];
                for (k, v) in spec["selector"]["matchLabels"].as_hash().expect("selector") {
                    assert_eq!(
                        &template["metadata"]["labels"][s(k, "label")],
                        v,
                        "{file}: selector does not match the pod labels"
                    );
                }
                let pod = &template["spec"];
                for v in pod["volumes"].as_vec().into_iter().flatten() {
                    if let Some(cm) = v["configMap"]["name"].as_str() {
                        assert!(config_maps.contains(cm), "{file}: no ConfigMap {cm}");
                    }
                    if let Some(pvc) = v["persistentVolumeClaim"]["claimName"].as_str() {
                        assert!(claims.contains(pvc), "{file}: no PVC {pvc}");
                    }
                }
                for c in pod["containers"].as_vec().expect("containers") {
                    for e in c["env"].as_vec().into_iter().flatten() {
                        if let Some(secret) = e["valueFrom"]["secretKeyRef"]["name"].as_str() {
                            assert!(secrets.contains(secret), "{file}: no Secret {secret}");
                        }
                    }
                    if c["name"].as_str() == Some("gap-auditor") {
                        check_auditor_container(file, c);
                        auditors += 1;
                    }
                }
                // Time for the drain (persist gaps, commit the settled watermark).
                assert!(
                    pod["terminationGracePeriodSeconds"].as_i64().unwrap_or(30) >= 60,
                    "{file}: terminationGracePeriodSeconds"
                );
            }
            "PodMonitor" => {
                // It selects the pods holding an auditor container, through that
                // container's port, and labels the job as the alert rules expect.
                let selector = doc["spec"]["selector"]["matchLabels"]
                    .as_hash()
                    .expect("PodMonitor selector");
                let pods: Vec<&Yaml> = resources
                    .iter()
                    .filter(|(_, d)| d["kind"].as_str() == Some("Deployment"))
                    .map(|(_, d)| &d["spec"]["template"])
                    .filter(|t| {
                        selector
                            .iter()
                            .all(|(k, v)| &t["metadata"]["labels"][s(k, "label")] == v)
                    })
                    .collect();
                assert_eq!(pods.len(), 1, "{file}: selects one pod template");
                let auditor = pods[0]["spec"]["containers"]
                    .as_vec()
                    .into_iter()
                    .flatten()
                    .find(|c| c["name"].as_str() == Some("gap-auditor"))
                    .unwrap_or_else(|| panic!("{file}: the selected pods have no auditor"));
                for ep in doc["spec"]["podMetricsEndpoints"]
                    .as_vec()
                    .expect("endpoints")
                {
                    let port = s(&ep["port"], "endpoint port");
                    assert!(
                        auditor["ports"]
                            .as_vec()
                            .into_iter()
                            .flatten()
                            .any(|p| p["name"].as_str() == Some(port)),
                        "{file}: the auditor container has no port {port}"
                    );
                    let job = ep["relabelings"]
                        .as_vec()
                        .into_iter()
                        .flatten()
                        .find(|r| r["targetLabel"].as_str() == Some("job"))
                        .and_then(|r| r["replacement"].as_str());
                    assert_eq!(job, Some(rules_scrape_job().as_str()), "{file}: job label");
                }
                pod_monitors += 1;
            }
            "PrometheusRule" => {
                let rules = yaml_docs("config/alerts/gap-auditor.rules.yml");
                assert_eq!(
                    doc["spec"], rules[0],
                    "{file}: not the rule file (scripts/render-alerts.py --prometheus-rule -o {file})"
                );
                prometheus_rules += 1;
            }
            "ServiceMonitor" => {
                let ports: BTreeSet<String> = resources
                    .iter()
                    .filter(|(_, d)| d["kind"].as_str() == Some("Service"))
                    .flat_map(|(_, d)| d["spec"]["ports"].as_vec().cloned().unwrap_or_default())
                    .filter_map(|p| p["name"].as_str().map(str::to_owned))
                    .collect();
                for ep in doc["spec"]["endpoints"].as_vec().expect("endpoints") {
                    let port = s(&ep["port"], "endpoint port");
                    assert!(ports.contains(port), "{file}: no Service port {port}");
                }
                assert!(!doc["spec"]["selector"]["matchLabels"].is_badvalue());
            }
            _ => {}
        }
    }
    assert_eq!(
        auditors, 2,
        "the standalone Deployment and the Flink sidecar"
    );
    assert_eq!(pod_monitors, 1, "a PodMonitor for the Flink sidecar");
    assert_eq!(prometheus_rules, 1, "the alert rules as a PrometheusRule");

    // A Service in front of auditor pods publishes them while /readyz fails: a sink outage
    // makes the pod unready exactly when its metrics (sink_up 0) must still be scraped.
    let auditor_pods: Vec<&Yaml> = resources
        .iter()
        .filter(|(_, d)| d["kind"].as_str() == Some("Deployment"))
        .map(|(_, d)| &d["spec"]["template"])
        .filter(|t| {
            t["spec"]["containers"]
                .as_vec()
                .into_iter()
                .flatten()
                .any(|c| c["name"].as_str() == Some("gap-auditor"))
        })
        .collect();
    let mut services = 0;
    for (file, svc) in resources
        .iter()
        .filter(|(_, d)| d["kind"].as_str() == Some("Service"))
    {
        let selector = svc["spec"]["selector"].as_hash().expect("selector");
        let selects_auditor = auditor_pods.iter().any(|t| {
            selector
                .iter()
                .all(|(k, v)| &t["metadata"]["labels"][s(k, "label")] == v)
        });
        if selects_auditor {
            services += 1;
            assert_eq!(
                svc["spec"]["publishNotReadyAddresses"].as_bool(),
                Some(true),
                "{file}: not-ready auditor pods would vanish from the Service"
            );
        }
    }
    assert_eq!(services, 2, "a Service for each auditor pod");
}

// ---------------------------------------------------------------------------------------
// systemd
// ---------------------------------------------------------------------------------------

#[test]
fn systemd_unit_is_hardened_and_drains() {
    let unit = read("deploy/systemd/gap-auditor.service");
    let value = |key: &str| -> String {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .next_back()
            .unwrap_or_else(|| panic!("no {key}="))
            .to_owned()
    };
    assert!(value("ExecStart").ends_with("run -c /etc/gap-auditor/gap-auditor.toml"));
    assert_eq!(value("StateDirectory"), "gap-auditor");
    assert_eq!(value("ProtectSystem"), "strict");
    assert_eq!(value("NoNewPrivileges"), "yes");
    assert_eq!(value("Restart"), "on-failure");
    assert_eq!(
        value("RestartPreventExitStatus"),
        "2",
        "exit 2 = bad config"
    );
    let raw = value("TimeoutStopSec");
    // systemd reads a bare number as seconds.
    let stop = raw
        .parse::<u64>()
        .map(Duration::from_secs)
        .or_else(|_| humantime::parse_duration(&raw))
        .unwrap_or_else(|e| panic!("TimeoutStopSec={raw}: {e}"));
    assert!(stop >= Duration::from_secs(60), "{stop:?}");
}

// ---------------------------------------------------------------------------------------
// Documented configurations
// ---------------------------------------------------------------------------------------

/// Removes the developer's `GAP_AUDITOR__` overrides: a snippet must be valid on its own.
fn clean_env(c: &mut Command) -> &mut Command {
    for (k, _) in std::env::vars() {
        if k.starts_with("GAP_AUDITOR__") {
            c.env_remove(k);
        }
    }
    c
}

/// The info string marking a runnable config block in the docs.
const MARKER: &str = "toml gap-auditor";

/// Every ```` ```toml gap-auditor ```` block of `text`: (line number, content).
fn marked_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        match &mut open {
            None => {
                if let Some(info) = t.strip_prefix("```")
                    && info.trim() == MARKER
                {
                    open = Some((n + 1, String::new()));
                }
            }
            Some((start, body)) => {
                if t.starts_with("```") {
                    out.push((*start, std::mem::take(body)));
                    open = None;
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "unclosed ```{MARKER} block");
    out
}

fn validate(name: &str, toml: &str) -> Result<(), String> {
    validate_with_env(name, toml, &[])
}

/// `validate-config` with environment overrides, as a deployment sets them.
fn validate_with_env(name: &str, toml: &str, env: &[(String, String)]) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("snippet.toml");
    std::fs::write(&path, toml).expect("write snippet");
    let out = clean_env(&mut Command::new(BIN))
        .args(["validate-config", "-c"])
        .arg(&path)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir.path())
        .output()
        .expect("run validate-config");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{name}: validate-config exit {:?}: {}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn doc_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.push(root().join("README.md"));
    files.sort();
    files
}

#[test]
fn every_marked_config_snippet_in_the_docs_validates() {
    let mut failures = Vec::new();
    let mut count = 0;
    let mut in_operator_guide = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).expect("read doc");
        let rel = file
            .strip_prefix(root())
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, block) in marked_blocks(&text) {
            count += 1;
            if rel == "docs/OPERATOR.md" {
                in_operator_guide += 1;
            }
            if let Err(e) = validate(&format!("{rel}:{line}"), &block) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The guide's strategies (key_columns, offset_columns, doc_id) at least: a marker lost
    // in an edit must not make this test pass on nothing.
    assert!(
        in_operator_guide >= 3,
        "only {in_operator_guide} marked blocks in docs/OPERATOR.md"
    );
    assert!(count >= in_operator_guide);
}

#[test]
fn the_snippet_extractor_sees_a_broken_snippet() {
    let doc = "text\n```toml gap-auditor\n[kafka]\nbrokers = \"k:9092\"\n[[audits]]\nname = \"x\"\ntopics = [\"t\"]\n[audits.record]\nformat = \"raw\"\n[audits.match]\nstrategy = \"offset_columns\"\n[audits.sink]\nkind = \"mysql\"\nurl = \"mysql://u@db:3306/d\"\ntabel = \"t\"\n```\n```toml\nnot = marked\n```\n";
    let blocks = marked_blocks(doc);
    assert_eq!(blocks.len(), 1);
    let err = validate("broken", &blocks[0].1).expect_err("a typo must fail");
    assert!(err.contains("tabel"), "{err}");
    let fixed = blocks[0].1.replace("tabel", "table");
    validate("fixed", &fixed).expect("the same snippet without the typo");
}

#[test]
fn deployment_configs_validate() {
    validate(
        "deploy/compose/gap-auditor.toml",
        &read("deploy/compose/gap-auditor.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let cm = yaml_docs("deploy/kubernetes/configmap.yaml");
    let toml = s(&cm[0]["data"]["gap-auditor.toml"], "ConfigMap data");
    validate("deploy/kubernetes/configmap.yaml", toml).unwrap_or_else(|e| panic!("{e}"));

    // The GAP_AUDITOR__ variables each manifest sets must name real keys (an unknown key
    // is refused), with their literal values or a placeholder for secrets.
    for file in [
        "deploy/kubernetes/deployment.yaml",
        "deploy/kubernetes/flink-sidecar.yaml",
    ] {
        let mut env = Vec::new();
        for doc in yaml_docs(file) {
            for c in doc["spec"]["template"]["spec"]["containers"]
                .as_vec()
                .into_iter()
                .flatten()
                .filter(|c| c["name"].as_str() == Some("gap-auditor"))
            {
                for e in c["env"].as_vec().into_iter().flatten() {
                    let name = s(&e["name"], "env name");
                    if name.starts_with("GAP_AUDITOR__") {
                        let value = e["value"].as_str().unwrap_or("placeholder");
                        env.push((name.to_owned(), value.to_owned()));
                    }
                }
            }
        }
        assert!(env.len() >= 3, "{file}: {env:?}");
        validate_with_env(file, toml, &env).unwrap_or_else(|e| panic!("{e}"));
    }
    // The image's and the unit's own overrides, on the documented example config.
    let mut env = Vec::new();
    for ins in dockerfile_instructions() {
        if let Some(kv) = ins.strip_prefix("ENV GAP_AUDITOR__")
            && let Some((k, v)) = kv.split_once('=')
        {
            env.push((format!("GAP_AUDITOR__{k}"), v.to_owned()));
        }
    }
    for line in read("deploy/systemd/gap-auditor.service").lines() {
        if let Some(kv) = line.strip_prefix("Environment=GAP_AUDITOR__")
            && let Some((k, v)) = kv.split_once('=')
        {
            env.push((format!("GAP_AUDITOR__{k}"), v.to_owned()));
        }
    }
    assert_eq!(env.len(), 2, "{env:?}");
    validate_with_env(
        "Dockerfile + systemd ENV",
        &read("config/gap-auditor.toml"),
        &env,
    )
    .unwrap_or_else(|e| panic!("{e}"));
}

/// Paths in the docs and deploy files that point into the repository exist.
#[test]
fn files_the_packaging_names_exist() {
    for rel in [
        "deploy/compose/alerts/gap-auditor.rules.yml",
        "dashboards/provisioning/dashboards/gap-auditor.yml",
        "docs/RUNBOOK.md",
        "docs/OPERATOR.md",
    ] {
        assert!(Path::new(ROOT).join(rel).exists(), "{rel} missing");
    }
}

// ---------------------------------------------------------------------------------------
// Helm chart (helm itself runs in scripts/helm-check.sh)
// ---------------------------------------------------------------------------------------

/// `scripts/helm/render.py --check` against this build's `config schema`, on `chart`.
fn helm_render_check(chart: &Path) -> std::process::Output {
    Command::new("python3")
        .arg(root().join("scripts/helm/render.py"))
        .args(["--check", "--bin", BIN, "--chart"])
        .arg(chart)
        .output()
        .expect("run python3 scripts/helm/render.py")
}

/// The chart's generated files are current: its copies of the PrometheusRule and the
/// dashboard are their sources byte for byte, and values.schema.json is what
/// `gap-auditor config schema` gives now. A copy that drifted is caught.
#[test]
fn helm_chart_copies_and_values_schema_are_current() {
    let chart = root().join("deploy/helm/gap-auditor");
    let out = helm_render_check(&chart);
    assert!(
        out.status.success(),
        "{} (run scripts/helm/render.py)",
        String::from_utf8_lossy(&out.stderr)
    );

    let dir = tempfile::tempdir().expect("tempdir");
    for rel in [
        "files/prometheusrule.yaml",
        "files/gap-auditor.json",
        "values.schema.json",
    ] {
        let copy = dir.path().join(rel);
        std::fs::create_dir_all(copy.parent().expect("parent")).expect("mkdir");
        std::fs::copy(chart.join(rel), &copy).expect("copy");
    }
    let drifted = dir.path().join("files/gap-auditor.json");
    let text = std::fs::read_to_string(&drifted).expect("read");
    std::fs::write(&drifted, text.replacen("gap-auditor", "gap-auditr", 1)).expect("write");
    let out = helm_render_check(dir.path());
    assert!(!out.status.success(), "a drifted dashboard copy passed");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("files/gap-auditor.json: stale"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The chart's default `config` (values.yaml) is a configuration the auditor accepts:
/// given to `validate-config` as the YAML it is (the loader reads YAML too).
#[test]
fn helm_chart_default_config_validates() {
    let values = yaml_docs("deploy/helm/gap-auditor/values.yaml");
    let mut text = String::new();
    yaml_rust2::YamlEmitter::new(&mut text)
        .dump(&values[0]["config"])
        .expect("emit the config as YAML");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).expect("write");
    let out = clean_env(&mut Command::new(BIN))
        .args(["validate-config", "-c"])
        .arg(&path)
        .current_dir(dir.path())
        .output()
        .expect("run validate-config");
    assert!(
        out.status.success(),
        "values.yaml config: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
