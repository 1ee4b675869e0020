//! Secrets never leak (`coord_conformance::cases::secrets`) against real etcd servers:
//! user `coord-app` on `COORD_TEST_ETCD_AUTH` (passwords in
//! `COORD_TEST_ETCD_AUTH_PASSWORDS`), TLS on `COORD_TEST_ETCD_TLS` with the certificates
//! in `COORD_TEST_CERTS`.

use std::sync::Arc;

use coord_conformance::{Case, Group, Needs, RealServer, UrlFactory, log_capture};

fn main() {
    log_capture::install();
    let app_password = std::env::var("COORD_TEST_ETCD_AUTH_PASSWORDS")
        .ok()
        .and_then(|all| all.split(',').next().map(str::to_owned));
    let factory = RealServer::from_env("etcd-auth")
        .unwrap_or_else(|e| panic!("{e}"))
        .zip(app_password)
        .map(|(server, password)| {
            Arc::new(UrlFactory {
                name: "etcd-auth",
                base: format!("etcd://coord-app:{password}@{}", server.addr()),
                server,
                connect: |url| Box::pin(async move { coord_etcd::connect(&url).await }),
            }) as Arc<dyn coord_conformance::Factory>
        });
    coord_conformance::run_groups(vec![Group {
        backend: "etcd-auth".into(),
        factory,
        why_missing: "set COORD_TEST_ETCD_AUTH, COORD_TEST_ETCD_AUTH_PASSWORDS, COORD_TEST_ETCD_TLS and \
                      COORD_TEST_CERTS (./scripts/test does)"
            .into(),
        cases: vec![
            Case {
                name: "etcd-auth::secrets_never_leak",
                needs: Needs::NONE,
                run: |ctx| {
                    Box::pin(async move {
                        let tls = std::env::var("COORD_TEST_ETCD_TLS")?;
                        coord_conformance::cases::secrets::never_leak(
                            ctx,
                            &format!("etcd+https://{tls}"),
                            |url| Ok(format!("{:?}", coord_etcd::EtcdOptions::from_url(url)?)),
                        )
                        .await
                    })
                },
            },
            Case {
                name: "etcd-auth::operations_keep_their_spans",
                needs: Needs::NONE,
                run: |ctx| Box::pin(coord_conformance::cases::spans::operations_keep_their_spans(ctx)),
            },
        ],
    }]);
}
