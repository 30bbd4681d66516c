//! The HTTP face of the test API server: routes, list, get and watch with the wire behaviour of
//! a kube-apiserver, and failures reported as `Status` objects with the real codes and reasons.
//!
//! Protocol points this module guarantees (kube-rs depends on each):
//! - lists are consistent snapshots; `limit`/`continue` pages all come from the first page's
//!   revision, and a continue token older than the retained history is an HTTP 410 Expired;
//! - a watch from a revision older than the retained history is HTTP 200 carrying exactly one
//!   in-stream `ERROR` event (Status 410, reason Expired), then the stream ends;
//! - a watch never misses or repeats an event between its backlog and its live tail, and with
//!   selectors an object moving into or out of the selection is seen as ADDED or DELETED;
//! - `sendInitialEvents=true` streams the current objects as ADDED, then a BOOKMARK annotated
//!   `k8s.io/initial-events-end: "true"`; bookmarks never carry a revision older than an event
//!   already sent on the same stream.

use crate::selector::{FieldSelector, LabelSelector, SelectorError};
use crate::store::{Action, Kind, ObjectKey, StoreError, StoredEvent, WithoutTypeMeta};
use crate::{RecordedRequest, Shared};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode, header};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// A request the server refuses, with the Status it answers.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("the server could not find the requested resource")]
    RouteNotFound,
    #[error("{plural} {name:?} not found")]
    GetNotFound { plural: &'static str, name: String },
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("invalid selector")]
    Selector(#[source] SelectorError),
    #[error("invalid value {value:?} for query parameter {name}: {why}")]
    QueryParam {
        name: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("the provided continue parameter is not valid")]
    ContinueMalformed,
    #[error(
        "The provided continue parameter is too old to display a consistent list result. \
         You can start a new list without the continue parameter."
    )]
    ContinueExpired(#[source] StoreError),
    #[error("too old resource version")]
    ListExpired(#[source] StoreError),
    #[error("Too large resource version: {requested}, current: {current}")]
    ListTooLargeVersion { requested: u64, current: u64 },
    #[error("the server is currently unable to handle the request")]
    Unavailable,
    #[error(
        "{plural}{group} is forbidden: User \"system:anonymous\" cannot {verb} resource \"{plural}\" in API group \"{group_name}\""
    )]
    Forbidden {
        verb: &'static str,
        plural: &'static str,
        group: String,
        group_name: String,
    },
    #[error("{0}")]
    BadRequest(String),
    #[error("{plural} {name:?} already exists")]
    AlreadyExists { plural: &'static str, name: String },
    #[error("{kind} {name:?} is invalid: {}", causes.iter().map(|(f, m)| format!("{f}: {m}")).collect::<Vec<_>>().join(", "))]
    Invalid {
        kind: &'static str,
        name: String,
        causes: Vec<(String, String)>,
    },
    #[error(
        "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    UnsupportedMediaType,
}

impl RequestError {
    fn status(&self) -> (StatusCode, &'static str, Value) {
        match self {
            RequestError::RouteNotFound => (StatusCode::NOT_FOUND, "NotFound", json!({})),
            RequestError::GetNotFound { plural, name } => (
                StatusCode::NOT_FOUND,
                "NotFound",
                json!({"name": name, "kind": plural}),
            ),
            RequestError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                json!({}),
            ),
            RequestError::Selector(_)
            | RequestError::QueryParam { .. }
            | RequestError::ContinueMalformed => (StatusCode::BAD_REQUEST, "BadRequest", json!({})),
            RequestError::ContinueExpired(_) | RequestError::ListExpired(_) => {
                (StatusCode::GONE, "Expired", json!({}))
            }
            RequestError::ListTooLargeVersion { .. } => (
                StatusCode::GATEWAY_TIMEOUT,
                "Timeout",
                json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                       "retryAfterSeconds": 1}),
            ),
            RequestError::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                json!({}),
            ),
            RequestError::Forbidden { plural, .. } => {
                (StatusCode::FORBIDDEN, "Forbidden", json!({"kind": plural}))
            }
            RequestError::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest", json!({})),
            RequestError::AlreadyExists { plural, name } => (
                StatusCode::CONFLICT,
                "AlreadyExists",
                json!({"name": name, "kind": plural}),
            ),
            RequestError::Invalid { kind, name, causes } => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                json!({"name": name, "kind": kind, "causes": causes.iter().map(|(f, m)|
                    json!({"reason": "FieldValueInvalid", "message": m, "field": f})).collect::<Vec<_>>()}),
            ),
            RequestError::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                json!({}),
            ),
        }
    }

    fn into_response(self) -> Response<Body> {
        let (code, reason, details) = self.status();
        let mut message = self.to_string();
        if let Some(source) = std::error::Error::source(&self) {
            message = format!("{message}: {source}");
        }
        let mut body = status_object(code.as_u16(), reason, &message);
        if details.as_object().is_some_and(|d| !d.is_empty()) {
            body["details"] = details;
        }
        json_response(code, &body)
    }
}

/// A `Status` object as the API server writes it.
fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).expect("serde_json::Value always serialises");
    json_bytes_response(code, bytes)
}

fn json_bytes_response(code: StatusCode, bytes: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed_unsync())
        .expect("static response parts are valid")
}

/// Where a path points.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Version,
    Health,
    Collection {
        kind: Kind,
        namespace: Option<String>,
    },
    Object {
        kind: Kind,
        namespace: Option<String>,
        name: String,
    },
}

fn route(path: &str) -> Option<Route> {
    let path = path.trim_end_matches('/');
    match path {
        "/version" => return Some(Route::Version),
        "/healthz" | "/livez" | "/readyz" => return Some(Route::Health),
        _ => {}
    }
    for kind in Kind::ALL {
        // The prefix must end at a segment: `/apis/GROUP/v1beta1` is another version.
        let Some(rest) = path
            .strip_prefix(kind.api_prefix())
            .filter(|rest| rest.starts_with('/'))
        else {
            continue;
        };
        let segments: Vec<&str> = rest.split('/').skip(1).collect();
        let plural = kind.plural();
        let found = match segments[..] {
            [p] if p == plural => Some(Route::Collection {
                kind,
                namespace: None,
            }),
            [p, name] if p == plural => Some(Route::Object {
                kind,
                namespace: None,
                name: name.into(),
            }),
            ["namespaces", ns, p] if p == plural && kind.namespaced() => Some(Route::Collection {
                kind,
                namespace: Some(ns.into()),
            }),
            ["namespaces", ns, p, name] if p == plural && kind.namespaced() => {
                Some(Route::Object {
                    kind,
                    namespace: Some(ns.into()),
                    name: name.into(),
                })
            }
            _ => None,
        };
        if let Some(found) = found {
            // A namespaced object is only addressable through its namespace.
            if let Route::Object {
                kind,
                namespace: None,
                ..
            } = &found
                && kind.namespaced()
            {
                return None;
            }
            return Some(found);
        }
    }
    None
}

/// The query parameters of list and watch requests.
#[derive(Debug, Default)]
struct Query {
    watch: bool,
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    label_selector: LabelSelector,
    field_selector: FieldSelector,
    limit: Option<u64>,
    continue_token: Option<String>,
    timeout_seconds: Option<u64>,
    allow_bookmarks: bool,
    send_initial_events: bool,
}

fn parse_bool(name: &'static str, value: &str) -> Result<bool, RequestError> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" | "" => Ok(false),
        _ => Err(RequestError::QueryParam {
            name,
            value: value.into(),
            why: "not a boolean",
        }),
    }
}

fn parse_u64(name: &'static str, value: &str) -> Result<u64, RequestError> {
    value.parse().map_err(|_| RequestError::QueryParam {
        name,
        value: value.into(),
        why: "not a non-negative integer",
    })
}

impl Query {
    fn parse(raw: &str) -> Result<Self, RequestError> {
        let mut q = Query::default();
        for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
            match &*name {
                "watch" => q.watch = parse_bool("watch", &value)?,
                "resourceVersion" => {
                    q.resource_version = Some(value.into_owned()).filter(|v| !v.is_empty())
                }
                "resourceVersionMatch" => {
                    q.resource_version_match = Some(value.into_owned()).filter(|v| !v.is_empty())
                }
                "labelSelector" => {
                    q.label_selector =
                        LabelSelector::parse(&value).map_err(RequestError::Selector)?
                }
                "fieldSelector" => {
                    q.field_selector =
                        FieldSelector::parse(&value).map_err(RequestError::Selector)?
                }
                "limit" => q.limit = Some(parse_u64("limit", &value)?).filter(|&l| l > 0),
                "continue" => q.continue_token = Some(value.into_owned()).filter(|v| !v.is_empty()),
                "timeoutSeconds" => q.timeout_seconds = Some(parse_u64("timeoutSeconds", &value)?),
                "allowWatchBookmarks" => {
                    q.allow_bookmarks = parse_bool("allowWatchBookmarks", &value)?
                }
                "sendInitialEvents" => {
                    q.send_initial_events = parse_bool("sendInitialEvents", &value)?
                }
                // Accepted and ignored, as they do not change what this server returns.
                _ => {}
            }
        }
        if let Some(m) = &q.resource_version_match
            && m != "NotOlderThan"
            && m != "Exact"
        {
            return Err(RequestError::QueryParam {
                name: "resourceVersionMatch",
                value: m.clone(),
                why: "must be NotOlderThan or Exact",
            });
        }
        Ok(q)
    }

    /// The requested revision; None for unset or "0" ("any version").
    fn revision(&self) -> Result<Option<u64>, RequestError> {
        match self.resource_version.as_deref() {
            None | Some("0") => Ok(None),
            Some(v) => parse_u64("resourceVersion", v).map(Some),
        }
    }

    fn selects(&self, key: &ObjectKey, namespace: Option<&str>, object: &Value) -> bool {
        namespace.is_none_or(|ns| key.namespace == ns)
            && self.label_selector.matches(object)
            && self.field_selector.matches(object)
    }
}

/// Serves one request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    let uri = request.uri();
    let recorded = RecordedRequest::new(
        request.method().as_str(),
        uri.path(),
        uri.query().unwrap_or(""),
    );
    shared
        .requests
        .lock()
        .expect("request log lock")
        .push(recorded);

    let stall = *shared.stall_until.lock().expect("stall lock");
    if let Some(until) = stall {
        tokio::time::sleep_until(until).await;
    }
    if shared.unavailable.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(RequestError::Unavailable.into_response());
    }
    let (parts, body) = request.into_parts();
    let content_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Ok(RequestError::BadRequest(format!("reading the body: {e}")).into_response());
        }
    };
    let response = serve(
        &shared,
        &parts.method,
        parts.uri.path(),
        parts.uri.query().unwrap_or(""),
        Write {
            content_type: &content_type,
            body: &body,
        },
    );
    Ok(response.unwrap_or_else(RequestError::into_response))
}

/// The body of a write request.
struct Write<'a> {
    content_type: &'a str,
    body: &'a [u8],
}

fn serve(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    raw_query: &str,
    write: Write<'_>,
) -> Result<Response<Body>, RequestError> {
    let route = route(path).ok_or(RequestError::RouteNotFound)?;
    let kind = match &route {
        Route::Collection { kind, .. } | Route::Object { kind, .. } => Some(*kind),
        _ => None,
    };
    if let Some(kind) = kind
        && shared
            .forbidden
            .lock()
            .expect("forbidden lock")
            .contains(&kind)
    {
        let group = kind.api_version().rsplit_once('/').map_or("", |(g, _)| g);
        return Err(RequestError::Forbidden {
            verb: verb(method, &route),
            plural: kind.plural(),
            group: if group.is_empty() {
                String::new()
            } else {
                format!(".{group}")
            },
            group_name: group.to_string(),
        });
    }
    match (method, route) {
        (&Method::POST, Route::Collection { kind, namespace }) => {
            create(shared, kind, namespace, &write)
        }
        (
            &Method::PATCH,
            Route::Object {
                kind,
                namespace,
                name,
            },
        ) => patch(shared, kind, namespace, &name, &write),
        (&Method::GET, route) => read(shared, route, raw_query),
        _ => Err(RequestError::MethodNotAllowed),
    }
}

/// The RBAC verb a request needs.
fn verb(method: &Method, route: &Route) -> &'static str {
    match *method {
        Method::POST => "create",
        Method::PATCH => "patch",
        Method::PUT => "update",
        Method::DELETE => "delete",
        _ if matches!(route, Route::Object { .. }) => "get",
        _ => "list",
    }
}

/// POST to a collection: the object is created, or refused as the real server refuses it.
fn create(
    shared: &Arc<Shared>,
    kind: Kind,
    namespace: Option<String>,
    write: &Write<'_>,
) -> Result<Response<Body>, RequestError> {
    let mut object: Value = serde_json::from_slice(write.body)
        .map_err(|e| RequestError::BadRequest(format!("the body is not a JSON object: {e}")))?;
    if !object.is_object() {
        return Err(RequestError::BadRequest(
            "the body is not a JSON object".into(),
        ));
    }
    for (field, want) in [("apiVersion", kind.api_version()), ("kind", kind.name())] {
        match object.get(field).and_then(Value::as_str) {
            None => object[field] = want.into(),
            Some(got) if got == want => {}
            Some(got) => {
                return Err(RequestError::BadRequest(format!(
                    "{field} {got:?} does not match the {want:?} of the request's path"
                )));
            }
        }
    }
    if kind.namespaced() {
        let Some(ns) = namespace else {
            return Err(RequestError::MethodNotAllowed);
        };
        match object["metadata"]["namespace"].as_str() {
            None | Some("") => object["metadata"]["namespace"] = ns.into(),
            Some(got) if got == ns => {}
            Some(_) => {
                return Err(RequestError::BadRequest(
                    "the namespace of the provided object does not match the namespace sent on the request".into(),
                ));
            }
        }
    }
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        return Err(RequestError::Invalid {
            kind: kind.name(),
            name,
            causes: vec![(
                "metadata.name".into(),
                "name or generateName is required".into(),
            )],
        });
    }
    if kind == Kind::Event {
        validate_event(&object)?;
    }
    let mut store = shared.store.lock().expect("store lock");
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if store.get(kind, &ns, &name).is_some() {
        return Err(RequestError::AlreadyExists {
            plural: kind.plural(),
            name,
        });
    }
    let (event, stored) = store
        .apply(object)
        .map_err(|e| RequestError::BadRequest(e.to_string()))?;
    if let Some(event) = event {
        let _ = shared.events.send(event);
    }
    Ok(json_response(StatusCode::CREATED, &stored))
}

/// PATCH of one object with a JSON merge patch (RFC 7386; a strategic merge patch means the
/// same for the fields these kinds have).
fn patch(
    shared: &Arc<Shared>,
    kind: Kind,
    namespace: Option<String>,
    name: &str,
    write: &Write<'_>,
) -> Result<Response<Body>, RequestError> {
    let media = write.content_type.split(';').next().unwrap_or("").trim();
    if media != "application/merge-patch+json" && media != "application/strategic-merge-patch+json"
    {
        return Err(RequestError::UnsupportedMediaType);
    }
    let patch: Value = serde_json::from_slice(write.body)
        .map_err(|e| RequestError::BadRequest(format!("the patch is not JSON: {e}")))?;
    let mut store = shared.store.lock().expect("store lock");
    let ns = namespace.unwrap_or_default();
    let current = store
        .get(kind, &ns, name)
        .ok_or(RequestError::GetNotFound {
            plural: kind.plural(),
            name: name.to_string(),
        })?;
    let mut object = (*current).clone();
    merge_patch(&mut object, &patch);
    if kind == Kind::Event {
        validate_event(&object)?;
    }
    let (event, stored) = store
        .apply(object)
        .map_err(|e| RequestError::BadRequest(e.to_string()))?;
    if let Some(event) = event {
        let _ = shared.events.send(event);
    }
    Ok(json_response(StatusCode::OK, &stored))
}

/// RFC 7386: objects merge key by key, `null` deletes, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Some(fields) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().expect("made an object above");
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            merge_patch(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The checks the API server makes on an events.k8s.io/v1 Event, for the fields a client
/// writes: what a real server would answer 422 to is answered 422 here.
fn validate_event(event: &Value) -> Result<(), RequestError> {
    let mut causes = Vec::new();
    let text = |field: &str| event[field].as_str().unwrap_or("");
    if event["eventTime"].as_str().is_none_or(str::is_empty) {
        causes.push(("eventTime".to_string(), "Required value".to_string()));
    }
    for field in [
        "reportingController",
        "reportingInstance",
        "action",
        "reason",
    ] {
        let value = text(field);
        if value.is_empty() {
            causes.push((field.to_string(), "Required value".to_string()));
        } else if value.len() > 128 {
            causes.push((field.to_string(), "must have at most 128 bytes".to_string()));
        }
    }
    if !matches!(text("type"), "Normal" | "Warning") {
        causes.push((
            "type".to_string(),
            "Unsupported value: must be Normal or Warning".to_string(),
        ));
    }
    if text("note").len() > 1024 {
        causes.push((
            "note".to_string(),
            "must have at most 1024 bytes".to_string(),
        ));
    }
    if let Some(series) = event.get("series").filter(|s| !s.is_null()) {
        if series["count"].as_u64().is_none_or(|c| c < 2) {
            causes.push((
                "series.count".to_string(),
                "should be at least 2".to_string(),
            ));
        }
        if series["lastObservedTime"]
            .as_str()
            .is_none_or(str::is_empty)
        {
            causes.push((
                "series.lastObservedTime".to_string(),
                "Required value".to_string(),
            ));
        }
    }
    let regarding_ns = event["regarding"]["namespace"].as_str().unwrap_or("");
    if !regarding_ns.is_empty() && Some(regarding_ns) != event["metadata"]["namespace"].as_str() {
        causes.push((
            "regarding.namespace".to_string(),
            "does not match event.namespace".to_string(),
        ));
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(RequestError::Invalid {
        kind: "Event",
        name: event["metadata"]["name"].as_str().unwrap_or("").to_string(),
        causes,
    })
}

fn read(
    shared: &Arc<Shared>,
    route: Route,
    raw_query: &str,
) -> Result<Response<Body>, RequestError> {
    match route {
        Route::Version => Ok(json_response(StatusCode::OK, &version_info())),
        Route::Health => Ok(Response::new(
            Full::new(Bytes::from_static(b"ok")).boxed_unsync(),
        )),
        Route::Object {
            kind,
            namespace,
            name,
        } => {
            let store = shared.store.lock().expect("store lock");
            let object = store.get(kind, namespace.as_deref().unwrap_or(""), &name);
            let object = object.ok_or(RequestError::GetNotFound {
                plural: kind.plural(),
                name,
            })?;
            Ok(json_response(StatusCode::OK, &object))
        }
        Route::Collection { kind, namespace } => {
            let query = Query::parse(raw_query)?;
            if query.watch {
                watch(shared, kind, namespace, query)
            } else {
                list(shared, kind, namespace.as_deref(), &query)
            }
        }
    }
}

fn version_info() -> Value {
    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-kubenft-testkit", "gitCommit": "",
           "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
           "compiler": "gc", "platform": "linux/amd64"})
}

/// Position of a paged list: the snapshot revision and the last key already returned.
#[derive(Debug, PartialEq, Eq)]
struct ContinueToken {
    rv: u64,
    after: (String, String),
}

impl ContinueToken {
    fn encode(&self) -> String {
        let inner =
            json!({"v": "meta.k8s.io/v1", "rv": self.rv, "start": [self.after.0, self.after.1]});
        BASE64.encode(inner.to_string())
    }

    fn decode(token: &str) -> Result<Self, RequestError> {
        let bytes = BASE64
            .decode(token)
            .map_err(|_| RequestError::ContinueMalformed)?;
        let inner: Value =
            serde_json::from_slice(&bytes).map_err(|_| RequestError::ContinueMalformed)?;
        let rv = inner["rv"]
            .as_u64()
            .ok_or(RequestError::ContinueMalformed)?;
        let part = |i: usize| {
            inner["start"][i]
                .as_str()
                .map(str::to_string)
                .ok_or(RequestError::ContinueMalformed)
        };
        Ok(Self {
            rv,
            after: (part(0)?, part(1)?),
        })
    }
}

fn list(
    shared: &Arc<Shared>,
    kind: Kind,
    namespace: Option<&str>,
    query: &Query,
) -> Result<Response<Body>, RequestError> {
    let store = shared.store.lock().expect("store lock");
    let current = store.resource_version();
    let (snapshot_rv, after) = match &query.continue_token {
        Some(token) => {
            if query.resource_version.is_some() {
                return Err(RequestError::QueryParam {
                    name: "resourceVersion",
                    value: query.resource_version.clone().unwrap_or_default(),
                    why: "specifying resource version is not allowed when using continue",
                });
            }
            let token = ContinueToken::decode(token)?;
            (token.rv, Some(token.after))
        }
        None => {
            let requested = query.revision()?;
            // Exact reads serve the past; otherwise (NotOlderThan, or the legacy meaning of a
            // bare resourceVersion without limit) the newest state that is not older.
            let exact = query.resource_version_match.as_deref() == Some("Exact")
                || (query.resource_version_match.is_none()
                    && query.limit.is_some()
                    && requested.is_some());
            match requested {
                Some(rv) if rv > current => {
                    return Err(RequestError::ListTooLargeVersion {
                        requested: rv,
                        current,
                    });
                }
                Some(rv) if exact => (rv, None),
                _ => (current, None),
            }
        }
    };
    let limit = query
        .limit
        .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
    // The real server only knows the count when it need not filter.
    let counted = query.label_selector.is_empty() && query.field_selector.is_empty();
    let mut page: Vec<(ObjectKey, Arc<Value>)> = Vec::new();
    let mut remaining = 0usize;
    store
        .visit_at(
            kind,
            snapshot_rv,
            after
                .as_ref()
                .map(|(ns, name)| (ns.as_str(), name.as_str())),
            |key, obj| {
                if !query.selects(key, namespace, obj) {
                    return true;
                }
                if page.len() < limit {
                    page.push((key.clone(), obj.clone()));
                } else {
                    remaining += 1;
                }
                remaining == 0 || counted
            },
        )
        .map_err(|e| {
            if after.is_some() {
                RequestError::ContinueExpired(e)
            } else {
                RequestError::ListExpired(e)
            }
        })?;
    drop(store);

    let mut metadata = json!({"resourceVersion": snapshot_rv.to_string()});
    if remaining > 0
        && let Some((last, _)) = page.last()
    {
        let token = ContinueToken {
            rv: snapshot_rv,
            after: (last.namespace.clone(), last.name.clone()),
        };
        metadata["continue"] = token.encode().into();
        if counted {
            metadata["remainingItemCount"] = remaining.into();
        }
    }
    let envelope = json!({"kind": format!("{}List", kind.name()), "apiVersion": kind.api_version(),
                          "metadata": metadata, "items": []});
    let body = ListBody {
        envelope: &envelope,
        items: page.iter().map(|(_, obj)| WithoutTypeMeta(obj)).collect(),
    };
    let bytes = serde_json::to_vec(&body).expect("JSON values always serialise");
    Ok(json_bytes_response(StatusCode::OK, bytes))
}

/// A list's body: the fields of `envelope`, its `items` being `items`.
struct ListBody<'a> {
    envelope: &'a Value,
    items: Vec<WithoutTypeMeta<'a>>,
}

impl serde::Serialize for ListBody<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        #[serde(untagged)]
        enum Field<'a> {
            Items(&'a [WithoutTypeMeta<'a>]),
            Other(&'a Value),
        }
        let fields = self.envelope.as_object().into_iter().flatten();
        s.collect_map(fields.map(|(k, v)| match k.as_str() {
            "items" => (k, Field::Items(&self.items)),
            _ => (k, Field::Other(v)),
        }))
    }
}

/// Default server-side watch duration when the client gives no timeoutSeconds (the real
/// server uses its min-request-timeout, 1800 s, with jitter).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(1800);

/// Everything a watch stream task needs, captured under the store lock.
struct WatchPlan {
    kind: Kind,
    namespace: Option<String>,
    query: Query,
    /// Objects to announce as ADDED first (initial state).
    initial: Vec<(ObjectKey, Arc<Value>)>,
    /// Whether to close the initial state with an initial-events-end bookmark.
    initial_end_bookmark: bool,
    backlog: Vec<Arc<StoredEvent>>,
    /// The revision the stream stands at before the backlog.
    position: u64,
    live: broadcast::Receiver<Arc<StoredEvent>>,
}

fn watch(
    shared: &Arc<Shared>,
    kind: Kind,
    namespace: Option<String>,
    query: Query,
) -> Result<Response<Body>, RequestError> {
    if query.send_initial_events {
        if query.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(RequestError::QueryParam {
                name: "resourceVersionMatch",
                value: query.resource_version_match.clone().unwrap_or_default(),
                why: "sendInitialEvents requires resourceVersionMatch=NotOlderThan",
            });
        }
        if !query.allow_bookmarks {
            return Err(RequestError::QueryParam {
                name: "allowWatchBookmarks",
                value: "false".into(),
                why: "sendInitialEvents requires allowWatchBookmarks=true",
            });
        }
    } else if query.resource_version_match.is_some() {
        return Err(RequestError::QueryParam {
            name: "resourceVersionMatch",
            value: query.resource_version_match.clone().unwrap_or_default(),
            why: "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        });
    }
    let requested = query.revision()?;
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let body = StreamBody::new(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), rx))
    }));
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.boxed_unsync())
        .expect("static response parts are valid");

    let plan = {
        let store = shared.store.lock().expect("store lock");
        // Subscribing under the store lock: writes publish under the same lock, so the backlog
        // and the live tail neither overlap nor leave a gap.
        let live = shared.events.subscribe();
        let current = store.resource_version();
        let fresh_start = query.send_initial_events || requested.is_none();
        let (initial, backlog, position) = if fresh_start {
            let initial = store
                .list_at(kind, current)
                .expect("the current revision is always retained");
            (initial, Vec::new(), current)
        } else {
            let from = requested.unwrap_or(current);
            match store.events_since(from) {
                Ok(backlog) => (Vec::new(), backlog, from),
                Err(expired) => {
                    drop(store);
                    let error = status_object(410, "Expired", &expired.to_string());
                    let line = event_line("ERROR", &error);
                    tokio::spawn(async move { tx.send(line).await });
                    return Ok(response);
                }
            }
        };
        WatchPlan {
            kind,
            namespace,
            initial_end_bookmark: query.send_initial_events,
            query,
            initial,
            backlog,
            position,
            live,
        }
    };
    let closed = shared.watch_epoch.subscribe();
    let bookmark_interval = shared.bookmark_interval;
    tokio::spawn(stream_watch(plan, tx, closed, bookmark_interval));
    Ok(response)
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": kind, "object": object}))
        .expect("JSON values serialise");
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(kind: Kind, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": kind.name(), "apiVersion": kind.api_version(), "metadata": metadata}),
    )
}

impl WatchPlan {
    /// What a stored event looks like through this watch's filters, if anything.
    fn translate(&self, event: &StoredEvent) -> Option<Bytes> {
        if event.key.kind != self.kind {
            return None;
        }
        let ns = self.namespace.as_deref();
        let now = self.query.selects(&event.key, ns, &event.object);
        let before = event
            .previous
            .as_ref()
            .is_some_and(|p| self.query.selects(&event.key, ns, p));
        let kind = match event.action {
            Action::Added if now => "ADDED",
            Action::Deleted if before => "DELETED",
            Action::Modified if before && now => "MODIFIED",
            Action::Modified if now => "ADDED",
            Action::Modified if before => "DELETED",
            _ => return None,
        };
        Some(event_line(kind, &event.object))
    }
}

/// Sends one line; false when the client is gone or the watch was dropped.
async fn send_unless_closed(
    tx: &mpsc::Sender<Bytes>,
    closed: &tokio::sync::watch::Receiver<u64>,
    line: Bytes,
) -> bool {
    !closed.has_changed().unwrap_or(true) && tx.send(line).await.is_ok()
}

async fn stream_watch(
    mut plan: WatchPlan,
    tx: mpsc::Sender<Bytes>,
    mut closed: tokio::sync::watch::Receiver<u64>,
    bookmark_interval: Duration,
) {
    let timeout = plan
        .query
        .timeout_seconds
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let deadline = tokio::time::Instant::now() + timeout;
    let ns = plan.namespace.clone();
    // Catch-up phase: a drop_watches() arriving meanwhile ends the stream just as it does later.
    for (key, object) in std::mem::take(&mut plan.initial) {
        if plan.query.selects(&key, ns.as_deref(), &object)
            && !send_unless_closed(&tx, &closed, event_line("ADDED", &object)).await
        {
            return;
        }
    }
    if plan.initial_end_bookmark
        && !send_unless_closed(&tx, &closed, bookmark(plan.kind, plan.position, true)).await
    {
        return;
    }
    for event in std::mem::take(&mut plan.backlog) {
        plan.position = event.rv;
        if let Some(line) = plan.translate(&event)
            && !send_unless_closed(&tx, &closed, line).await
        {
            return;
        }
    }
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + bookmark_interval,
        bookmark_interval,
    );
    loop {
        tokio::select! {
            // Closing wins over pending events: a dropped watch delivers nothing written after
            // the drop, and the client fetches it on resumption from its last revision.
            biased;
            _ = closed.changed() => return,
            _ = tx.closed() => return,
            _ = tokio::time::sleep_until(deadline) => {
                if plan.query.allow_bookmarks {
                    let _ = tx.send(bookmark(plan.kind, plan.position, false)).await;
                }
                return;
            }
            received = plan.live.recv() => match received {
                Ok(event) => {
                    plan.position = event.rv;
                    if let Some(line) = plan.translate(&event)
                        && tx.send(line).await.is_err()
                    {
                        return;
                    }
                }
                // A watcher that cannot keep up is cut off, as the real server does; the client
                // resumes from its last revision.
                Err(broadcast::error::RecvError::Lagged(_) | broadcast::error::RecvError::Closed) => return,
            },
            _ = ticks.tick(), if plan.query.allow_bookmarks => {
                if tx.send(bookmark(plan.kind, plan.position, false)).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_to_collections_and_objects_of_served_kinds_only() {
        assert_eq!(
            route("/api/v1/services"),
            Some(Route::Collection {
                kind: Kind::Service,
                namespace: None
            })
        );
        assert_eq!(
            route("/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices"),
            Some(Route::Collection {
                kind: Kind::EndpointSlice,
                namespace: Some("kube-system".into())
            })
        );
        assert_eq!(
            route("/api/v1/nodes/node-1"),
            Some(Route::Object {
                kind: Kind::Node,
                namespace: None,
                name: "node-1".into()
            })
        );
        assert_eq!(
            route("/apis/networking.k8s.io/v1/servicecidrs"),
            Some(Route::Collection {
                kind: Kind::ServiceCIDR,
                namespace: None
            })
        );
        assert_eq!(
            route("/apis/networking.k8s.io/v1/servicecidrs/kubernetes"),
            Some(Route::Object {
                kind: Kind::ServiceCIDR,
                namespace: None,
                name: "kubernetes".into()
            })
        );
        assert_eq!(
            route("/apis/networking.k8s.io/v1/namespaces/x/servicecidrs"),
            None,
            "cluster-scoped"
        );
        assert_eq!(route("/apis/networking.k8s.io/v1beta1/servicecidrs"), None);
        assert_eq!(route("/api/v1beta1/services"), None);
        assert_eq!(route("/api/v1/namespaces/x/nodes"), None);
        assert_eq!(route("/api/v1/services/web"), None);
        assert_eq!(route("/api/v1/pods"), None);
    }

    #[test]
    fn continue_tokens_round_trip_and_garbage_is_rejected() {
        let token = ContinueToken {
            rv: 42,
            after: ("default".into(), "web".into()),
        };
        assert_eq!(ContinueToken::decode(&token.encode()).unwrap(), token);
        assert!(matches!(
            ContinueToken::decode("not-base64!"),
            Err(RequestError::ContinueMalformed)
        ));
    }

    #[test]
    fn kube_rs_query_strings_parse_including_the_leading_empty_pair() {
        let q = Query::parse(
            "&watch=true&timeoutSeconds=290&allowWatchBookmarks=true&sendInitialEvents=true\
             &resourceVersionMatch=NotOlderThan&resourceVersion=0",
        )
        .unwrap();
        assert!(q.watch && q.allow_bookmarks && q.send_initial_events);
        assert_eq!(q.timeout_seconds, Some(290));
        assert_eq!(q.revision().unwrap(), None);
        assert!(Query::parse("limit=abc").is_err());
        assert!(Query::parse("resourceVersionMatch=Newest").is_err());
    }
}
