//! Views of a big cache held while the cache follows changes does not make each change
//! copy the map: bytes allocated per followed put stay far below one copy of the map.
//! (A `BTreeMap` behind an `Arc` copied itself, over 1 MB here, on the first change of
//! every batch while a view of the current state was held.)

use coord_core::ConfigStore as _;

/// Counts every byte allocated (the only test of this binary: nothing else allocates
/// meanwhile but the test harness's idle main thread).
#[global_allocator]
static HEAP: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

fn allocated() -> u64 {
    HEAP.total_allocated() as u64
}

#[tokio::test(flavor = "current_thread")]
async fn a_held_view_does_not_make_changes_copy_the_map() {
    const KEYS: usize = 10_000;
    const PUTS: u64 = 50;
    let client = coord_mem::connect(&format!("mem://held-view-{}", std::process::id())).expect("connect");
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(100) {
        let txn = chunk.iter().fold(coord_core::Txn::new(), |t, i| {
            t.put(format!("big/{i:05}"), b"v".to_vec())
        });
        client.commit(txn).await.expect("the keys");
    }
    let mut cache = client.config_cache("big").await.expect("cache");
    assert_eq!(cache.view().len(), KEYS);
    let held = cache.view();
    // A reader holding the current view, as a request handler does while the next
    // change arrives.
    let mut current = cache.view();
    let before = allocated();
    for n in 0..PUTS {
        let value = n.to_string().into_bytes();
        client.put("big/00042", value.clone()).await.expect("put");
        loop {
            current = cache.changed().await.expect("the cache");
            if current.get("big/00042").is_some_and(|e| e.value == value) {
                break;
            }
        }
    }
    let per_put = (allocated() - before) / PUTS;
    assert_eq!(held.len(), KEYS, "the held view changed");
    assert_eq!(current.len(), KEYS);
    // One copy of the map is over 1 MB (10,000 keys with their entries).
    assert!(
        per_put < 64 * 1024,
        "{per_put} bytes allocated per followed put with a view of {KEYS} keys held: the map is copied"
    );
    println!("{per_put} bytes allocated per followed put with a view of {KEYS} keys held");
}
