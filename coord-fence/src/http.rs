//! The HTTP gate: a `tower` layer that admits a request only while the fencing token in
//! its `coord-fence` header is the highest its resource has seen (feature `http`), and
//! the header on the client's side (`http::Request` builders; `reqwest` with feature
//! `reqwest`).
//!
//! # The header
//!
//! ```text
//! coord-fence: resource=invoices; token=8123
//! ```
//!
//! `resource` names what the lock protects (the lock's name is the usual choice; `coord
//! lock` exports this header's value as `$COORD_FENCE`, and the name alone as
//! `$COORD_FENCE_RESOURCE`); `token` is the grant's fencing token in decimal. A request
//! may carry several `coord-fence` headers (one per resource, or several in one header
//! separated by commas, as a proxy may join them); it is admitted only if every one is. Resource names are 1 to [`MAX_RESOURCE_LEN`]
//! visible ASCII characters other than `;`, `,`, `"` and `\`.
//!
//! # Answers
//!
//! | when | status | body |
//! |---|---|---|
//! | a higher token was seen | `409 Conflict`, header `coord-fence-seen: <token>` | `fenced: "invoices" has seen token 8200, above this request's 8123 …` |
//! | no header (unless [`FenceLayer::optional`]) | `428 Precondition Required` | what to send |
//! | a malformed header | `400 Bad Request` | what is wrong with it |
//! | the record cannot be read or raised | `503 Service Unavailable` | the store's error |
//!
//! Otherwise the request goes on to the service, which never sees a refused one.
//!
//! # Examples
//!
//! An axum service behind the layer, and a client request carrying a guard's fence:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use axum::{Router, routing::put};
//! use coord_core::{Granted as _, Lock as _};
//! use coord_fence::http::{FenceHeader, FenceLayer, FenceRequest as _};
//! use tower::ServiceExt as _;
//!
//! let app = Router::new()
//!     .route("/invoices/{id}", put(|| async { "stored" }))
//!     .layer(FenceLayer::new());
//!
//! let client = coord_mem::connect("mem://http-gate-doc")?;
//! let guard = client.lock("invoices").await?;
//! let request = http::Request::put("/invoices/7")
//!     .fence(&FenceHeader::new(guard.name(), guard.token())?)
//!     .body(axum::body::Body::empty())?;
//! let response = app.oneshot(request).await?;
//! assert_eq!(response.status(), http::StatusCode::OK);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use coord_core::FencingToken;
use futures::future::BoxFuture;
use http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use tracing::Instrument as _;

use crate::Error;
use crate::MAX_RESOURCE_LEN;

/// The request header that carries a fence: `coord-fence: resource=NAME; token=N`.
pub const HEADER: HeaderName = HeaderName::from_static("coord-fence");

/// The response header of a `409 Conflict`: the highest token the resource has seen.
pub const SEEN_HEADER: HeaderName = HeaderName::from_static("coord-fence-seen");

/// One fence as a request carries it: a resource and a token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceHeader {
    resource: String,
    token: FencingToken,
}

impl FenceHeader {
    /// The fence of `token` for `resource` (a guard's: `FenceHeader::new(guard.name(),
    /// guard.token())`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a resource a header cannot carry (see the
    /// [module](self) docs) or a token above `i64::MAX` (what the SQL record holds).
    pub fn new(resource: impl Into<String>, token: FencingToken) -> Result<FenceHeader, Error> {
        let resource = resource.into();
        check_resource(&resource)?;
        if i64::try_from(token.get()).is_err() {
            return Err(Error::InvalidArgument(format!(
                "token {token} is above the largest a fence record holds ({})",
                i64::MAX
            )));
        }
        Ok(FenceHeader { resource, token })
    }

    /// Parses a `coord-fence` header's value.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] saying what is wrong with it.
    pub fn parse(value: &str) -> Result<FenceHeader, Error> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "coord-fence header {value:?} {why}; send `coord-fence: resource=NAME; token=N`"
            ))
        };
        let (mut resource, mut token) = (None, None);
        for part in value.split(';') {
            let (key, val) = part
                .trim()
                .split_once('=')
                .ok_or_else(|| bad("has a part without '='"))?;
            let slot = match key.trim() {
                "resource" => &mut resource,
                "token" => &mut token,
                other => return Err(bad(&format!("has an unknown part {other:?}"))),
            };
            if slot.replace(val.trim()).is_some() {
                return Err(bad(&format!("names {:?} twice", key.trim())));
            }
        }
        let resource = resource.ok_or_else(|| bad("has no resource"))?;
        let token = token.ok_or_else(|| bad("has no token"))?;
        let token: u64 = token
            .parse()
            .map_err(|_| bad(&format!("has token {token:?}, not a decimal number")))?;
        FenceHeader::new(resource, FencingToken(token)).map_err(|e| bad(&e.to_string()))
    }

    /// The resource.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The token.
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The header's value.
    pub fn value(&self) -> HeaderValue {
        // Checked in `new`: visible ASCII only, so this cannot fail; an empty value
        // would be refused by any gate.
        HeaderValue::from_str(&self.to_string()).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

impl fmt::Display for FenceHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resource={}; token={}", self.resource, self.token)
    }
}

fn check_resource(resource: &str) -> Result<(), Error> {
    if resource.is_empty() || resource.len() > MAX_RESOURCE_LEN {
        return Err(Error::InvalidArgument(format!(
            "a resource name is 1 to {MAX_RESOURCE_LEN} bytes, not {}",
            resource.len()
        )));
    }
    if let Some(c) = resource
        .chars()
        .find(|c| !c.is_ascii_graphic() || matches!(c, ';' | ',' | '"' | '\\'))
    {
        return Err(Error::InvalidArgument(format!(
            "resource {resource:?} has {c:?}: a fence header carries visible ASCII other than ; , \" \\"
        )));
    }
    Ok(())
}

/// Adds a fence to an outgoing request: `http::request::Builder`, and
/// `reqwest::RequestBuilder` with feature `reqwest`.
pub trait FenceRequest {
    /// The request with a `coord-fence` header for `fence` (added beside any others).
    fn fence(self, fence: &FenceHeader) -> Self;
}

impl FenceRequest for http::request::Builder {
    fn fence(self, fence: &FenceHeader) -> Self {
        self.header(HEADER, fence.value())
    }
}

#[cfg(feature = "reqwest")]
impl FenceRequest for reqwest::RequestBuilder {
    fn fence(self, fence: &FenceHeader) -> Self {
        self.header(HEADER, fence.value())
    }
}

/// Where a gate keeps each resource's highest-seen token, and how it holds a resource
/// while an admitted request runs.
///
/// [`MemorySeen`] (the default) keeps them in the process; [`SqlSeen`] in the SQL gate's
/// table, shared by every replica of a service.
#[async_trait]
pub trait SeenStore: Send + Sync + 'static {
    /// Admits `token` for `resource` — raising the resource's record to it — or refuses it
    /// with [`Error::Fenced`]. The admission holds the resource until it is finished:
    /// a higher token's admission waits for it, so no request of an older holder is
    /// still running once a newer holder's request is admitted.
    ///
    /// # Errors
    ///
    /// [`Error::Fenced`]; any other error is the store's own (the request is answered
    /// `503`).
    async fn admit(&self, resource: &str, token: FencingToken) -> Result<Admission, Error>;
}

/// What an admitted request holds until the service has returned its response (see
/// [`SeenStore::admit`]).
///
/// Finish it with [`Admission::finish`]; dropped unfinished (the request was cancelled),
/// it is finished on a spawned task.
pub struct Admission {
    held: Option<Box<dyn Held>>,
}

/// Something an [`Admission`] holds, and how it lets go.
#[async_trait]
pub trait Held: Send + 'static {
    /// Lets go of the resource: commits the record (a SQL store) or releases its turn.
    ///
    /// # Errors
    ///
    /// The store's, when its record cannot be kept.
    async fn finish(self: Box<Self>) -> Result<(), Error>;
}

impl Admission {
    /// An admission holding `held` until it is finished.
    pub fn new(held: impl Held) -> Admission {
        Admission {
            held: Some(Box::new(held)),
        }
    }

    /// Lets go of the resource (see [`Held::finish`]).
    ///
    /// # Errors
    ///
    /// The store's.
    pub async fn finish(mut self) -> Result<(), Error> {
        match self.held.take() {
            Some(held) => held.finish().await,
            None => Ok(()),
        }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(held) = self.held.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                if let Err(e) = held.finish().await {
                    tracing::warn!(error = %e, "a cancelled request's fence admission could not be finished");
                }
            });
        }
    }
}

impl fmt::Debug for Admission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admission")
            .field("held", &self.held.is_some())
            .finish()
    }
}

/// The highest-seen tokens in this process's memory: right for one replica, or for
/// tests. Each resource keeps its token and an admission turn; the map grows by one
/// entry per resource ever seen.
///
/// Requests with the same token run concurrently once the token has its turn (two that
/// arrive together as the token's very first may run one after the other); a higher
/// token waits for the requests of lower ones that are running, and refuses them from
/// its arrival on.
#[derive(Clone, Debug, Default)]
pub struct MemorySeen {
    resources: Arc<Mutex<HashMap<String, Arc<Slot>>>>,
}

#[derive(Debug)]
struct Slot {
    /// The highest token that has asked.
    seen: Mutex<u64>,
    /// The token whose requests may run.
    turn: Arc<tokio::sync::RwLock<u64>>,
}

impl MemorySeen {
    /// An empty record.
    pub fn new() -> MemorySeen {
        MemorySeen::default()
    }

    /// The highest token `resource` has seen (`None` before its first request).
    pub fn seen(&self, resource: &str) -> Option<FencingToken> {
        let slot = self.slot_if_any(resource)?;
        let seen = *slot.seen.lock().unwrap_or_else(|p| p.into_inner());
        Some(FencingToken(seen))
    }

    fn slot_if_any(&self, resource: &str) -> Option<Arc<Slot>> {
        let map = self.resources.lock().unwrap_or_else(|p| p.into_inner());
        map.get(resource).cloned()
    }

    fn slot(&self, resource: &str) -> Arc<Slot> {
        let mut map = self.resources.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(resource.to_owned())
            .or_insert_with(|| {
                Arc::new(Slot {
                    seen: Mutex::new(0),
                    turn: Arc::new(tokio::sync::RwLock::new(0)),
                })
            })
            .clone()
    }
}

struct TurnHeld(#[allow(dead_code)] tokio::sync::OwnedRwLockReadGuard<u64>);

#[async_trait]
impl Held for TurnHeld {
    async fn finish(self: Box<Self>) -> Result<(), Error> {
        Ok(())
    }
}

#[async_trait]
impl SeenStore for MemorySeen {
    async fn admit(&self, resource: &str, token: FencingToken) -> Result<Admission, Error> {
        let slot = self.slot(resource);
        let fenced = |seen: u64| Error::Fenced {
            resource: resource.to_owned(),
            token,
            seen: FencingToken(seen),
        };
        {
            let mut seen = slot.seen.lock().unwrap_or_else(|p| p.into_inner());
            if token.get() < *seen {
                return Err(fenced(*seen));
            }
            *seen = token.get();
        }
        // Readers of the same token share the turn; a higher token takes it over once
        // the running requests of lower ones are done (the lock is fair: requests that
        // come after a waiting higher token queue behind it).
        let turn = slot.turn.clone().read_owned().await;
        if *turn == token.get() {
            return Ok(Admission::new(TurnHeld(turn)));
        }
        drop(turn);
        let mut turn = slot.turn.clone().write_owned().await;
        if *turn > token.get() {
            return Err(fenced(*turn));
        }
        *turn = token.get();
        Ok(Admission::new(TurnHeld(turn.downgrade())))
    }
}

/// The highest-seen tokens in the SQL gate's table ([`SqlGate`](crate::sql::SqlGate)),
/// shared by every replica of a service and by the SQL gate itself: a fenced request and
/// a fenced transaction on the same resource see one record.
///
/// An admission is a transaction that has raised the resource's row and holds it
/// locked while the request runs; it commits when the service has returned its response. A
/// higher token's admission waits on the row, so no older request is running on any
/// replica once a newer one is admitted. Requests on one resource run one at a time
/// (the row lock is exclusive), even with the same token. If the service writes the same
/// database, gate that transaction itself with [`SqlGate::admit`](crate::sql::SqlGate::admit)
/// instead: the record and the writes then commit together.
///
/// If the commit after the request fails (the database went away), the raise may be
/// lost while the request's effects stay: it is logged (`warn`).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub struct SqlSeen<DB: crate::sql::GateDatabase> {
    pool: sqlx::Pool<DB>,
    gate: crate::sql::SqlGate,
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB: crate::sql::GateDatabase> SqlSeen<DB> {
    /// The record in `gate`'s table, through `pool` (the table must exist:
    /// [`SqlGate::create_table`](crate::sql::SqlGate::create_table)).
    pub fn new(pool: sqlx::Pool<DB>, gate: crate::sql::SqlGate) -> SqlSeen<DB> {
        SqlSeen { pool, gate }
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl<DB: crate::sql::GateDatabase> fmt::Debug for SqlSeen<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlSeen")
            .field("table", &self.gate.table())
            .finish()
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
struct TransactionHeld<DB: sqlx::Database>(sqlx::Transaction<'static, DB>);

#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[async_trait]
impl<DB: crate::sql::GateDatabase> Held for TransactionHeld<DB> {
    async fn finish(self: Box<Self>) -> Result<(), Error> {
        self.0.commit().await.map_err(Error::Database)
    }
}

#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[async_trait]
impl<DB: crate::sql::GateDatabase> SeenStore for SqlSeen<DB> {
    async fn admit(&self, resource: &str, token: FencingToken) -> Result<Admission, Error> {
        let tx = self.gate.begin(&self.pool, resource, token).await?;
        Ok(Admission::new(TransactionHeld(tx)))
    }
}

/// A `tower` layer admitting only requests whose `coord-fence` headers hold the highest
/// tokens their resources have seen (see the [module](self) docs).
///
/// # Fencing
///
/// Once a request with token `t` for a resource has been admitted, every request for
/// it with a lower token is refused with `409 Conflict` and never reaches the service;
/// an admitted request holds its resource until the service has returned its response,
/// so the service never runs a request of an older holder beside (or after) a newer
/// holder's. What is protected is what the service does for admitted requests until it
/// returns the response, and nothing else: work a streamed response body does after
/// that (its head is sent before the body), routes outside the layer, and writes that
/// reach the data some other way are not.
///
/// # Cancel safety
///
/// A request dropped while admitted (the client went away) finishes its admission on a
/// spawned task: the raise stands.
pub struct FenceLayer<S = MemorySeen> {
    store: Arc<S>,
    optional: bool,
}

impl<S> Clone for FenceLayer<S> {
    fn clone(&self) -> Self {
        FenceLayer {
            store: self.store.clone(),
            optional: self.optional,
        }
    }
}

impl FenceLayer<MemorySeen> {
    /// A layer keeping its record in this process ([`MemorySeen`]).
    pub fn new() -> FenceLayer<MemorySeen> {
        FenceLayer::with_store(MemorySeen::new())
    }
}

impl Default for FenceLayer<MemorySeen> {
    fn default() -> Self {
        FenceLayer::new()
    }
}

impl<S: SeenStore> FenceLayer<S> {
    /// A layer keeping its record in `store` ([`SqlSeen`] for several replicas).
    pub fn with_store(store: S) -> FenceLayer<S> {
        FenceLayer {
            store: Arc::new(store),
            optional: false,
        }
    }

    /// Lets requests without a `coord-fence` header through unchecked (by default they
    /// are answered `428 Precondition Required`). Requests that carry one are still
    /// checked.
    pub fn optional(mut self) -> FenceLayer<S> {
        self.optional = true;
        self
    }
}

impl<S> fmt::Debug for FenceLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceLayer")
            .field("optional", &self.optional)
            .finish_non_exhaustive()
    }
}

impl<Inner, S> tower_layer::Layer<Inner> for FenceLayer<S> {
    type Service = FenceService<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        FenceService {
            inner,
            store: self.store.clone(),
            optional: self.optional,
        }
    }
}

/// The service [`FenceLayer`] wraps around another.
pub struct FenceService<Inner, S = MemorySeen> {
    inner: Inner,
    store: Arc<S>,
    optional: bool,
}

impl<Inner: Clone, S> Clone for FenceService<Inner, S> {
    fn clone(&self) -> Self {
        FenceService {
            inner: self.inner.clone(),
            store: self.store.clone(),
            optional: self.optional,
        }
    }
}

impl<Inner, S> fmt::Debug for FenceService<Inner, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FenceService")
            .field("optional", &self.optional)
            .finish_non_exhaustive()
    }
}

impl<Inner, S, ReqBody, ResBody> tower_service::Service<Request<ReqBody>> for FenceService<Inner, S>
where
    Inner: tower_service::Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send,
    Inner::Error: Send,
    S: SeenStore,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = Inner::Error;
    type Future = BoxFuture<'static, Result<Response<ResBody>, Inner::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone that was made ready is the one that serves this request.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let store = self.store.clone();
        let optional = self.optional;
        let span = tracing::debug_span!("coord_fence.http", method = %request.method(), uri = %request.uri());
        Box::pin(
            async move {
                let fences = match fences_of(&request) {
                    Ok(f) => f,
                    Err(e) => return Ok(answer(StatusCode::BAD_REQUEST, e.to_string(), None)),
                };
                if fences.is_empty() && !optional {
                    return Ok(answer(
                        StatusCode::PRECONDITION_REQUIRED,
                        "this resource is fenced: send `coord-fence: resource=NAME; token=N` with the fencing token of the lock you hold\n".to_owned(),
                        None,
                    ));
                }
                let mut admissions = Vec::with_capacity(fences.len());
                for fence in &fences {
                    match store.admit(fence.resource(), fence.token()).await {
                        Ok(a) => admissions.push(a),
                        Err(e @ Error::Fenced { seen, .. }) => {
                            tracing::debug!(resource = fence.resource(), token = %fence.token(), %seen, "fenced");
                            return Ok(answer(StatusCode::CONFLICT, format!("{e}\n"), Some(seen)));
                        }
                        Err(e) => {
                            return Ok(answer(
                                StatusCode::SERVICE_UNAVAILABLE,
                                format!("the fence record cannot be checked: {e}\n"),
                                None,
                            ));
                        }
                    }
                }
                let response = inner.call(request).await;
                for admission in admissions {
                    if let Err(e) = admission.finish().await {
                        tracing::warn!(error = %e, "a request's fence admission could not be recorded");
                    }
                }
                response
            }
            .instrument(span),
        )
    }
}

/// The request's fences, sorted by resource (admissions then always take resources in
/// one order: no two requests wait on each other's).
fn fences_of<B>(request: &Request<B>) -> Result<Vec<FenceHeader>, Error> {
    let mut fences = Vec::new();
    for value in request.headers().get_all(HEADER) {
        let text = value
            .to_str()
            .map_err(|_| Error::InvalidArgument("a coord-fence header is not visible ASCII".to_owned()))?;
        // A proxy may join repeated headers into one, separated by commas (resources
        // never contain one).
        for one in text.split(',') {
            fences.push(FenceHeader::parse(one)?);
        }
    }
    fences.sort_by(|a, b| a.resource.cmp(&b.resource));
    if let Some(w) = fences.windows(2).find(|w| w[0].resource == w[1].resource) {
        return Err(Error::InvalidArgument(format!(
            "two coord-fence headers name resource {:?}",
            w[0].resource
        )));
    }
    Ok(fences)
}

fn answer<B: From<String>>(status: StatusCode, body: String, seen: Option<FencingToken>) -> Response<B> {
    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Some(seen) = seen {
        headers.insert(SEEN_HEADER, HeaderValue::from(seen.get()));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_bad_ones_say_why() {
        let h = FenceHeader::new("jobs/nightly", FencingToken(42)).expect("valid");
        assert_eq!(h.to_string(), "resource=jobs/nightly; token=42");
        assert_eq!(FenceHeader::parse(&h.to_string()).expect("parses"), h);
        assert_eq!(
            FenceHeader::parse(" token=7 ;resource=a ").expect("parses"),
            FenceHeader::new("a", FencingToken(7)).expect("valid")
        );
        for (bad, says) in [
            ("resource=a", "no token"),
            ("token=1", "no resource"),
            ("resource=a; token=x", "not a decimal"),
            ("resource=a; token=-1", "not a decimal"),
            ("resource=a; token=1; token=2", "twice"),
            ("resource=a; token=1; owner=b", "unknown part"),
            ("resource=; token=1", "1 to"),
            ("a:1", "without '='"),
            ("resource=a; token=9223372036854775808", "above"),
        ] {
            let e = FenceHeader::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(FenceHeader::new("a b", FencingToken(1)).is_err());
        assert!(FenceHeader::new("a;b", FencingToken(1)).is_err());
        assert!(FenceHeader::new("é", FencingToken(1)).is_err());
    }

    #[tokio::test]
    async fn memory_refuses_lower_tokens_and_same_tokens_share() {
        let seen = MemorySeen::new();
        let a = seen.admit("r", FencingToken(5)).await.expect("first");
        let b = seen
            .admit("r", FencingToken(5))
            .await
            .expect("same token runs beside");
        a.finish().await.expect("finish");
        b.finish().await.expect("finish");
        let e = seen.admit("r", FencingToken(4)).await.expect_err("lower");
        assert!(matches!(e, Error::Fenced { seen, .. } if seen == FencingToken(5)));
        assert_eq!(seen.seen("r"), Some(FencingToken(5)));
        assert_eq!(seen.seen("other"), None);
    }

    #[tokio::test]
    async fn a_higher_token_waits_for_running_lower_ones_and_refuses_later_ones() {
        let seen = MemorySeen::new();
        let old = seen.admit("r", FencingToken(5)).await.expect("old");
        let newer = {
            let seen = seen.clone();
            tokio::spawn(async move { seen.admit("r", FencingToken(9)).await })
        };
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!newer.is_finished(), "admitted while an older request ran");
        // From the newer one's arrival on, the old holder is refused.
        assert!(seen.admit("r", FencingToken(5)).await.is_err());
        old.finish().await.expect("finish");
        let admitted = newer.await.expect("join").expect("newer admitted");
        admitted.finish().await.expect("finish");
    }
}
