//! The backend contract as a backend crate's user reaches it: the concrete backend
//! behind a client, and what a backend promises when it says nothing.

use coord_core::Capabilities;

/// `client.backend().as_any()` downcasts to the backend, not to the `Arc` around it
/// (a blanket `AsAny` over every type once made it the `Arc`, silently).
#[tokio::test]
async fn the_backend_behind_a_client_is_the_concrete_one() {
    let client = coord_mem::connect("mem://contract-as-any").expect("connect");
    assert!(
        client.backend_as::<coord_mem::MemClient>().is_some(),
        "backend_as"
    );
    let any = client.backend().as_any();
    assert!(
        any.downcast_ref::<coord_mem::MemClient>().is_some(),
        "client.backend().as_any() is not the MemClient (is the Arc: {})",
        any.downcast_ref::<std::sync::Arc<dyn coord_core::raw::Backend>>()
            .is_some()
    );
}

/// A backend that declares no capabilities claims none — not `survey` or `mark`, whose
/// operations then default to `Unsupported` — while mem declares everything.
#[tokio::test]
async fn undeclared_capabilities_are_none() {
    let state = coord_core::raw::ClientState::new(
        "test",
        String::new(),
        coord_core::SessionStatus::new(coord_core::SessionState::Connected, 1),
    );
    assert_eq!(state.capabilities(), Capabilities::NONE);
    assert!(!state.capabilities().survey && !state.capabilities().mark);
    let client = coord_mem::connect("mem://contract-capabilities").expect("connect");
    assert_eq!(client.capabilities(), Capabilities::ALL);
}
