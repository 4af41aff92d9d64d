//! A minimal Confluent Schema Registry, for the tests only.
//!
//! No real registry can be installed here: Confluent's is Java from Confluent's own
//! repositories (neither Debian nor PyPI carries it), and Karapace is not on PyPI any more
//! (`pip install karapace`: "No matching distribution"). So this fake answers the documented
//! REST shape of the calls the serializers and the auditor make, and nothing else:
//! - `POST /subjects/{subject}/versions` `{"schema", "schemaType"?, "references"?}` →
//!   `{"id": N}` (the same schema text registered again keeps its id), as Confluent's
//!   serializers call it with `auto.register.schemas`;
//! - `GET /schemas/ids/{id}` → `{"schema", "schemaType"?, "references"?}` (no `schemaType`
//!   for Avro, as the real one answers) or 404 `{"error_code": 40403, ...}`;
//! - `GET /subjects/{subject}/versions/{version}` → `{"subject", "version", "id", "schema",
//!   ...}` (references);
//!
//! It can be switched "down" (503 to every request), counts the GETs per id, and checks HTTP
//! basic auth when given credentials (401 `{"error_code": 40101}` otherwise).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

#[derive(Default)]
struct State {
    /// (schema JSON as stored, subject, version) by id.
    schemas: Mutex<Vec<(Value, String, i64)>>,
    down: AtomicBool,
    id_gets: AtomicUsize,
    requests: AtomicUsize,
    auth: Option<String>,
}

/// A running fake registry; stops with the test's runtime.
#[derive(Clone)]
pub struct FakeRegistry {
    state: Arc<State>,
    pub url: String,
}

impl FakeRegistry {
    /// Starts one on a free loopback port.
    pub async fn start() -> Self {
        Self::start_with_auth(None).await
    }

    /// Starts one that demands HTTP basic auth `user:password`.
    pub async fn start_with_auth(auth: Option<(&str, &str)>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(State {
            auth: auth.map(|(u, p)| {
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
                )
            }),
            ..State::default()
        });
        let s = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let s = s.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(&s, req).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self { state, url }
    }

    /// Every request answers 503 while down.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// `GET /schemas/ids/{id}` requests answered so far (200 or not).
    pub fn id_gets(&self) -> usize {
        self.state.id_gets.load(Ordering::SeqCst)
    }

    /// Every request so far, whatever the answer.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Registers a schema directly (as another producer would have); returns its id.
    pub fn register(&self, subject: &str, body: Value) -> i64 {
        register(&self.state, subject, body)
    }
}

fn register(s: &State, subject: &str, mut body: Value) -> i64 {
    if let Some(o) = body.as_object_mut() {
        // The real registry stores AVRO as the absence of schemaType.
        if o.get("schemaType").and_then(Value::as_str) == Some("AVRO") {
            o.remove("schemaType");
        }
    }
    let mut schemas = s.schemas.lock().expect("lock");
    if let Some(i) = schemas.iter().position(|(b, _, _)| b == &body) {
        return i as i64 + 1;
    }
    let version = schemas.iter().filter(|(_, sub, _)| sub == subject).count() as i64 + 1;
    schemas.push((body, subject.to_string(), version));
    schemas.len() as i64
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/vnd.schemaregistry.v1+json")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

async fn handle(s: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    s.requests.fetch_add(1, Ordering::SeqCst);
    if s.down.load(Ordering::SeqCst) {
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error_code": 50301, "message": "down for the test"}),
        );
    }
    if let Some(want) = &s.auth {
        let got = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if got != Some(want.as_str()) {
            return reply(
                StatusCode::UNAUTHORIZED,
                json!({"error_code": 40101, "message": "Unauthorized"}),
            );
        }
    }
    let path = req.uri().path().to_string();
    let parts: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .map(|p| {
            form_urlencoded::parse(format!("x={p}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        })
        .collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    let not_found = |code: i64, what: &str| {
        reply(
            StatusCode::NOT_FOUND,
            json!({"error_code": code, "message": format!("{what} not found")}),
        )
    };
    match (req.method().clone(), parts.as_slice()) {
        (Method::POST, ["subjects", subject, "versions"]) => {
            let subject = subject.to_string();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let Ok(body) = serde_json::from_slice::<Value>(&body) else {
                return reply(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    json!({"error_code": 42201, "message": "Invalid schema"}),
                );
            };
            // Only what the registry keeps: the schema, its type and references.
            let mut kept = serde_json::Map::new();
            for k in ["schema", "schemaType", "references"] {
                if let Some(v) = body.get(k)
                    && !(k == "references" && v.as_array().is_some_and(Vec::is_empty))
                {
                    kept.insert(k.into(), v.clone());
                }
            }
            let id = register(s, &subject, Value::Object(kept));
            reply(StatusCode::OK, json!({"id": id}))
        }
        (Method::GET, ["schemas", "ids", id]) => {
            s.id_gets.fetch_add(1, Ordering::SeqCst);
            let schemas = s.schemas.lock().expect("lock");
            match id
                .parse::<usize>()
                .ok()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| schemas.get(i))
            {
                Some((body, _, _)) => reply(StatusCode::OK, body.clone()),
                None => not_found(40403, "Schema"),
            }
        }
        (Method::GET, ["subjects", subject, "versions", version]) => {
            let schemas = s.schemas.lock().expect("lock");
            let found = schemas.iter().enumerate().rev().find(|(_, (_, sub, v))| {
                sub == subject && (*version == "latest" || version.parse::<i64>().ok() == Some(*v))
            });
            match found {
                Some((i, (body, sub, v))) => {
                    let mut out = body.clone();
                    if let Some(o) = out.as_object_mut() {
                        o.insert("subject".into(), json!(sub));
                        o.insert("version".into(), json!(v));
                        o.insert("id".into(), json!(i + 1));
                    }
                    reply(StatusCode::OK, out)
                }
                None => not_found(40401, "Subject"),
            }
        }
        _ => not_found(404, "Path"),
    }
}

/// The fake answers the documented shapes (its own check, so a test built on it is built on
/// what the real registry says).
#[tokio::test]
async fn the_fake_answers_the_documented_shapes() {
    let r = FakeRegistry::start().await;
    let client = reqwest::Client::new();
    let avro = json!({"schema": "\"string\"", "schemaType": "AVRO"});
    let got: Value = serde_json::from_slice(
        &client
            .post(format!("{}/subjects/t-value/versions", r.url))
            .body(avro.to_string())
            .send()
            .await
            .expect("post")
            .bytes()
            .await
            .expect("body"),
    )
    .expect("json");
    assert_eq!(got, json!({"id": 1}));
    assert_eq!(
        r.register("t-value", json!({"schema": "\"string\""})),
        1,
        "same schema, same id"
    );
    let got: Value = serde_json::from_slice(
        &client
            .get(format!("{}/schemas/ids/1", r.url))
            .send()
            .await
            .expect("get")
            .bytes()
            .await
            .expect("body"),
    )
    .expect("json");
    assert_eq!(
        got,
        json!({"schema": "\"string\""}),
        "AVRO has no schemaType"
    );
    let missing = client
        .get(format!("{}/schemas/ids/99", r.url))
        .send()
        .await
        .expect("get");
    assert_eq!(missing.status(), 404);
    r.set_down(true);
    let down = client
        .get(format!("{}/schemas/ids/1", r.url))
        .send()
        .await
        .expect("get");
    assert_eq!(down.status(), 503);
    assert_eq!(r.id_gets(), 2, "the 503 is not counted as an id GET");
}

/// The auditor's registry client against the fake: references are fetched through
/// `GET /subjects/{subject}/versions/{version}`, dependencies first, and the schema they
/// make compiles and decodes.
#[tokio::test]
async fn references_are_fetched_dependencies_first() {
    use gap_auditor::record::avro::AvroSchema;
    use gap_auditor::record::registry::RegistryClient;
    let r = FakeRegistry::start().await;
    let country = r#"{"type":"enum","name":"Country","namespace":"ex","symbols":["DE","FR"]}"#;
    let geo = r#"{"type":"record","name":"Geo","namespace":"ex","fields":[{"name":"country","type":"ex.Country"}]}"#;
    let top = r#"{"type":"record","name":"Top","namespace":"ex","fields":[{"name":"geo","type":"ex.Geo"}]}"#;
    r.register("country", json!({"schema": country}));
    r.register(
        "geo",
        json!({"schema": geo, "references": [{"name": "ex.Country", "subject": "country", "version": 1}]}),
    );
    let id = r.register(
        "top/value",
        json!({"schema": top, "references": [{"name": "ex.Geo", "subject": "geo", "version": 1}]}),
    );
    let cfg = gap_auditor::config::SchemaRegistryConfig {
        url: r.url.clone(),
        username: None,
        password: None,
        password_file: None,
        ca_file: None,
        timeout: std::time::Duration::from_secs(2),
    };
    let client = RegistryClient::new(&cfg).expect("client");
    let raw = client.fetch(id as u32).await.expect("fetched");
    let names: Vec<&str> = raw.references.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ex.Country", "ex.Geo"], "dependencies first");
    let schema = AvroSchema::compile(id as u32, &raw).expect("compiles");
    // Top { geo: Geo { country: FR } }: the enum index 1 (zigzag 2).
    let v = schema
        .decode(&[2], gap_auditor::record::TimestampFormat::Sql)
        .expect("decodes");
    assert_eq!(v.pointer("/geo/country"), Some(&json!("FR")));
    // An id the registry does not know is NotFound, not Unavailable.
    let e = client.fetch(999).await.expect_err("unknown id");
    assert_eq!(
        e,
        gap_auditor::record::registry::RegistryError::NotFound(999)
    );
}
