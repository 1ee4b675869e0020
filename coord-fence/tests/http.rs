//! The HTTP gate on a real axum service over loopback TCP, called with reqwest, with
//! grants from coord's in-memory backend: a holder paused past its session calls after
//! its successor — refused with 409 through the layer, an overwrite without it (the
//! negative control); two replicas sharing the SQL record (SQLite).

#![cfg(all(feature = "http", feature = "reqwest", feature = "sqlite"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::put;
use coord_core::Granted as _;
use coord_core::{FencingToken, Lock as _};
use coord_fence::http::{FenceHeader, FenceLayer, FenceRequest as _, SEEN_HEADER, SeenStore, SqlSeen};
use coord_fence::sql::SqlGate;
use coord_mem::MemClient;
use reqwest::StatusCode;

type Result<T = ()> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What the service stores: the last owner written.
type Owner = Arc<Mutex<Option<String>>>;

/// A service storing each PUT's body as the owner, behind `layer` if given; its base URL.
async fn serve<S: SeenStore>(layer: Option<FenceLayer<S>>, owner: Owner) -> Result<String> {
    async fn store(State(owner): State<Owner>, body: String) -> &'static str {
        *owner.lock().unwrap_or_else(|p| p.into_inner()) = Some(body);
        "stored"
    }
    let mut app = Router::new().route("/owner", put(store)).with_state(owner);
    if let Some(layer) = layer {
        app = app.layer(layer);
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}"))
}

fn current(owner: &Owner) -> Option<String> {
    owner.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

async fn put_owner(
    http: &reqwest::Client,
    base: &str,
    fence: Option<&FenceHeader>,
    who: &str,
) -> Result<reqwest::Response> {
    let mut request = http.put(format!("{base}/owner")).body(who.to_owned());
    if let Some(f) = fence {
        request = request.fence(f);
    }
    Ok(request.send().await?)
}

/// Holder A is paused past its session (its link cut); B is granted the lock and calls
/// the service; A resumes and makes the call it was about to make. Through the layer
/// A's call is refused with 409 (naming B's token) and B's write stays; without the
/// layer A overwrites B.
#[tokio::test]
async fn a_paused_holder_cannot_overwrite_its_successor() -> Result {
    for gated in [true, false] {
        let owner = Owner::default();
        let layer = gated.then(FenceLayer::new);
        let base = serve(layer, owner.clone()).await?;
        let http = reqwest::Client::new();
        let url = format!("mem://fence-http-{}-{gated}?session_ttl=1s", std::process::id());
        let (a, b) = (coord_mem::connect(&url)?, coord_mem::connect(&url)?);
        let held = a.lock("invoices").await?;
        let fence_a = FenceHeader::new(held.name(), held.token())?;
        a.backend_as::<MemClient>()
            .ok_or("not a mem client")?
            .suspend(Duration::from_secs(30));
        let successor = tokio::time::timeout(Duration::from_secs(20), b.lock("invoices")).await??;
        let fence_b = FenceHeader::new(successor.name(), successor.token())?;
        assert!(fence_b.token() > fence_a.token());
        let answer = put_owner(&http, &base, Some(&fence_b), "b").await?;
        assert_eq!(answer.status(), StatusCode::OK);
        let late = put_owner(&http, &base, Some(&fence_a), "a").await?;
        if gated {
            assert_eq!(late.status(), StatusCode::CONFLICT);
            let seen = late
                .headers()
                .get(SEEN_HEADER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            assert_eq!(seen, Some(fence_b.token().to_string()));
            let body = late.text().await?;
            assert!(body.contains("has seen token"), "{body}");
            assert_eq!(
                current(&owner).as_deref(),
                Some("b"),
                "the successor's work was overwritten"
            );
        } else {
            assert_eq!(late.status(), StatusCode::OK);
            assert_eq!(
                current(&owner).as_deref(),
                Some("a"),
                "without the layer the old holder did not overwrite"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn requests_without_a_good_header_never_reach_the_service() -> Result {
    let owner = Owner::default();
    let base = serve(Some(FenceLayer::new()), owner.clone()).await?;
    let http = reqwest::Client::new();
    let missing = put_owner(&http, &base, None, "x").await?;
    assert_eq!(missing.status(), StatusCode::PRECONDITION_REQUIRED);
    assert!(
        missing
            .text()
            .await?
            .contains("coord-fence: resource=NAME; token=N")
    );
    for bad in [
        "resource=r",
        "token=1",
        "resource=r; token=x",
        "resource=r; token=1, resource=r; token=2",
    ] {
        let answer = http
            .put(format!("{base}/owner"))
            .header("coord-fence", bad)
            .body("x")
            .send()
            .await?;
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    // Two headers for one resource: which one counts is not the gate's to guess.
    let twice = http
        .put(format!("{base}/owner"))
        .header("coord-fence", "resource=r; token=1")
        .header("coord-fence", "resource=r; token=2")
        .body("x")
        .send()
        .await?;
    assert_eq!(twice.status(), StatusCode::BAD_REQUEST);
    assert_eq!(current(&owner), None);

    // An optional layer lets unfenced requests by but still checks fenced ones.
    let owner = Owner::default();
    let base = serve(Some(FenceLayer::new().optional()), owner.clone()).await?;
    assert_eq!(
        put_owner(&http, &base, None, "free").await?.status(),
        StatusCode::OK
    );
    let ten = FenceHeader::new("r", FencingToken(10))?;
    let nine = FenceHeader::new("r", FencingToken(9))?;
    assert_eq!(
        put_owner(&http, &base, Some(&ten), "ten").await?.status(),
        StatusCode::OK
    );
    assert_eq!(
        put_owner(&http, &base, Some(&nine), "nine").await?.status(),
        StatusCode::CONFLICT
    );
    assert_eq!(current(&owner).as_deref(), Some("ten"));
    Ok(())
}

/// Every fence of a request is checked: one stale resource refuses the whole request.
#[tokio::test]
async fn a_request_with_several_fences_needs_all_of_them() -> Result {
    let owner = Owner::default();
    let base = serve(Some(FenceLayer::new()), owner.clone()).await?;
    let http = reqwest::Client::new();
    let (a5, b5, b4) = (
        FenceHeader::new("a", FencingToken(5))?,
        FenceHeader::new("b", FencingToken(5))?,
        FenceHeader::new("b", FencingToken(4))?,
    );
    let both = http
        .put(format!("{base}/owner"))
        .fence(&a5)
        .fence(&b5)
        .body("both");
    assert_eq!(both.send().await?.status(), StatusCode::OK);
    let stale = http
        .put(format!("{base}/owner"))
        .fence(&a5)
        .fence(&b4)
        .body("stale");
    assert_eq!(stale.send().await?.status(), StatusCode::CONFLICT);
    assert_eq!(current(&owner).as_deref(), Some("both"));
    // The same fences joined into one header, as a proxy may send them.
    let joined = |value: &str| {
        http.put(format!("{base}/owner"))
            .header("coord-fence", value)
            .body(value.to_owned())
    };
    let ok = joined("resource=a; token=5, resource=b; token=5").send().await?;
    assert_eq!(ok.status(), StatusCode::OK);
    let stale = joined("resource=a; token=5, resource=b; token=4").send().await?;
    assert_eq!(stale.status(), StatusCode::CONFLICT);
    Ok(())
}

/// Two replicas of a service share the SQL gate's record: a newer holder's call to one
/// replica fences the older holder's calls to the other.
#[tokio::test]
async fn replicas_share_the_sql_record() -> Result {
    let dir = tempfile::tempdir()?;
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("fences.db"))
        .create_if_missing(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    let gate = SqlGate::new();
    gate.create_table(&pool).await?;
    let owner = Owner::default();
    let one = serve(
        Some(FenceLayer::with_store(SqlSeen::new(pool.clone(), gate.clone()))),
        owner.clone(),
    )
    .await?;
    let two = serve(
        Some(FenceLayer::with_store(SqlSeen::new(pool.clone(), gate.clone()))),
        owner.clone(),
    )
    .await?;
    let http = reqwest::Client::new();
    let (old, new) = (
        FenceHeader::new("invoices", FencingToken(100))?,
        FenceHeader::new("invoices", FencingToken(200))?,
    );
    assert_eq!(
        put_owner(&http, &one, Some(&old), "old").await?.status(),
        StatusCode::OK
    );
    assert_eq!(
        put_owner(&http, &two, Some(&new), "new").await?.status(),
        StatusCode::OK
    );
    let late = put_owner(&http, &one, Some(&old), "old again").await?;
    assert_eq!(late.status(), StatusCode::CONFLICT);
    assert_eq!(current(&owner).as_deref(), Some("new"));
    // The SQL gate reads the same record.
    assert_eq!(gate.seen(&pool, "invoices").await?, Some(FencingToken(200)));
    Ok(())
}
