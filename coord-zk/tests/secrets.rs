//! Secrets never leak (`coord_conformance::cases::secrets`) against a real ZooKeeper:
//! digest credentials on `COORD_TEST_ZK`, TLS on `COORD_TEST_ZK_TLS` with the
//! certificates in `COORD_TEST_CERTS`.

use std::sync::Arc;

use coord_conformance::{Case, Group, Needs, RealServer, UrlFactory, log_capture};

fn main() {
    log_capture::install();
    let factory = RealServer::from_env("zk")
        .unwrap_or_else(|e| panic!("{e}"))
        .map(|server| {
            Arc::new(UrlFactory {
                name: "zk",
                base: format!("zk://alice:zk-secret-pw-93f1@{}", server.addr()),
                server,
                connect: |url| Box::pin(async move { coord_zk::connect(&url).await }),
            }) as Arc<dyn coord_conformance::Factory>
        });
    coord_conformance::run_groups(vec![Group {
        backend: "zk".into(),
        factory,
        why_missing: "set COORD_TEST_ZK, COORD_TEST_ZK_TLS and COORD_TEST_CERTS (./scripts/test does)".into(),
        cases: vec![
            Case {
                name: "zk::secrets_never_leak",
                needs: Needs::NONE,
                run: |ctx| {
                    Box::pin(async move {
                        let tls = std::env::var("COORD_TEST_ZK_TLS")?;
                        coord_conformance::cases::secrets::never_leak(
                            ctx,
                            &format!("zk+tls://{tls}"),
                            |url| Ok(format!("{:?}", coord_zk::ZkOptions::from_url(url)?)),
                        )
                        .await
                    })
                },
            },
            Case {
                name: "zk::operations_keep_their_spans",
                needs: Needs::NONE,
                run: |ctx| Box::pin(coord_conformance::cases::spans::operations_keep_their_spans(ctx)),
            },
        ],
    }]);
}
