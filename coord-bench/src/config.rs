//! `config`: put, get and compare-and-set per second, coord beside the raw requests of
//! the same client library (interleaved blocks), and watch delivery latency (put sent →
//! event delivered to another client's watch).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use coord::{ConfigEvent, ConfigStore as _, Stats, Version};
use futures::StreamExt;
use zookeeper_client as zk;

use crate::measure::{Latencies, Row, cpu_time};
use crate::target::{Backend, Target, unique, zk_mkdir};

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Put,
    Get,
    Cas,
}

const OPS: [(Op, &str); 3] = [(Op::Put, "put"), (Op::Get, "get"), (Op::Cas, "cas")];

enum Subject {
    Coord {
        client: coord::Client,
        key: String,
        version: Option<Version>,
    },
    Zk {
        zk: zk::Client,
        path: String,
        version: i32,
        /// `raw-multi`: compare-and-set as coord's exact one is, one `multi` that checks
        /// an incarnation marker (a child of the node) and sets the data at its version;
        /// put and get as the raw floor's.
        marker: Option<String>,
    },
    Etcd {
        etcd: Box<etcd_client::Client>,
        key: String,
        rev: i64,
    },
}

impl Subject {
    fn label(&self) -> &'static str {
        match self {
            Subject::Coord { .. } => "coord",
            Subject::Zk { marker: Some(_), .. } => "raw-multi",
            _ => "raw-floor",
        }
    }

    async fn run(&mut self, op: Op, value: &[u8]) -> Result<()> {
        match self {
            Subject::Coord { client, key, version } => match op {
                Op::Put => *version = Some(client.put(key, value.to_vec()).await?),
                Op::Get => {
                    client.get(key).await?.context("the key is gone")?;
                }
                Op::Cas => *version = Some(client.compare_and_set(key, *version, value.to_vec()).await?),
            },
            Subject::Zk {
                zk,
                path,
                version,
                marker,
            } => match op {
                Op::Put => *version = zk.set_data(path, value, None).await?.version,
                Op::Get => {
                    zk.get_data(path).await?;
                }
                Op::Cas => match marker {
                    None => *version = zk.set_data(path, value, Some(*version)).await?.version,
                    Some(marker) => {
                        let mut multi = zk.new_multi_writer();
                        multi.add_check_version(marker, 0)?;
                        multi.add_set_data(path, value, Some(*version))?;
                        let results = multi.commit().await?;
                        match results.last() {
                            Some(zk::MultiWriteResult::SetData { stat }) => *version = stat.version,
                            other => bail!("the raw multi answered {other:?}"),
                        }
                    }
                },
            },
            Subject::Etcd { etcd, key, rev } => match op {
                Op::Put => {
                    *rev = etcd
                        .put(key.clone(), value, None)
                        .await?
                        .header()
                        .context("no header")?
                        .revision()
                }
                Op::Get => {
                    etcd.get(key.clone(), None).await?;
                }
                Op::Cas => {
                    let txn = etcd_client::Txn::new()
                        .when([etcd_client::Compare::mod_revision(
                            key.clone(),
                            etcd_client::CompareOp::Equal,
                            *rev,
                        )])
                        .and_then([etcd_client::TxnOp::put(key.clone(), value, None)]);
                    let resp = etcd.txn(txn).await?;
                    if !resp.succeeded() {
                        bail!("the raw compare-and-set lost to no one");
                    }
                    *rev = resp.header().context("no header")?.revision();
                }
            },
        }
        Ok(())
    }
}

pub async fn run(t: &Target, seconds: f64, deliveries: usize) -> Result<Vec<Row>> {
    let name = unique("config");
    let client = t.coord().await?;
    let key = format!("{name}/key");
    let version = Some(client.put(&key, b"0".to_vec()).await?);
    let mut subjects = vec![Subject::Coord {
        client: client.clone(),
        key: key.clone(),
        version,
    }];
    match t.backend {
        Backend::Mem => {}
        Backend::Zk => {
            let z = t.zk().await?;
            let path = format!("/coord-bench/{name}");
            zk_mkdir(&z, &path).await?;
            subjects.push(Subject::Zk {
                zk: z,
                path: path.clone(),
                version: 0,
                marker: None,
            });
            let z = t.zk().await?;
            let path = format!("{path}-multi");
            zk_mkdir(&z, &path).await?;
            let marker = format!("{path}/i-bench");
            zk_mkdir(&z, &marker).await?;
            subjects.push(Subject::Zk {
                zk: z,
                path,
                version: 0,
                marker: Some(marker),
            });
        }
        Backend::Etcd => {
            let mut etcd = t.etcd().await?;
            let key = format!("coord-bench/{name}");
            let rev = etcd
                .put(key.clone(), "0", None)
                .await?
                .header()
                .context("no header")?
                .revision();
            subjects.push(Subject::Etcd {
                etcd: Box::new(etcd),
                key,
                rev,
            });
        }
    }
    let blocks = 3;
    let per_block = Duration::from_secs_f64(seconds / (blocks * OPS.len()) as f64);
    let n = subjects.len();
    let mut lat: Vec<Vec<Latencies>> = vec![vec![Latencies::default(); OPS.len()]; n];
    let mut spent = vec![vec![Duration::ZERO; OPS.len()]; n];
    let mut cpu = vec![vec![Duration::ZERO; OPS.len()]; n];
    let mut coord_requests = [0u64; 3];
    let value = vec![b'v'; 64];
    for _ in 0..blocks {
        for (o, (op, _)) in OPS.iter().enumerate() {
            for (i, s) in subjects.iter_mut().enumerate() {
                let before: Stats = client.stats();
                let cpu_before = cpu_time();
                let start = Instant::now();
                while start.elapsed() < per_block {
                    let t0 = Instant::now();
                    s.run(*op, &value).await?;
                    lat[i][o].push(t0.elapsed());
                }
                spent[i][o] += start.elapsed();
                cpu[i][o] += cpu_time().saturating_sub(cpu_before);
                if i == 0 {
                    coord_requests[o] += client.stats().since(&before).data_requests();
                }
            }
        }
    }
    let mut rows = Vec::new();
    for (i, s) in subjects.iter().enumerate() {
        let mut row = Row::new("config", t.name(), s.label());
        for (o, (_, op)) in OPS.iter().enumerate() {
            row.set(
                &format!("{op}_per_s"),
                lat[i][o].len() as f64 / spent[i][o].as_secs_f64(),
            );
            row.set(&format!("{op}_p50_ms"), lat[i][o].ms(0.5));
            row.set(
                &format!("{op}_cpu_us"),
                cpu[i][o].as_secs_f64() * 1e6 / lat[i][o].len().max(1) as f64,
            );
            if i == 0 {
                row.set(
                    &format!("{op}_requests"),
                    coord_requests[o] as f64 / lat[i][o].len().max(1) as f64,
                );
            }
        }
        rows.push(row);
    }
    if let [coord, others @ ..] = rows.as_mut_slice() {
        for other in others.iter() {
            // `x_raw_<op>` against the raw floor, `x_raw-multi_<op>` against the multi.
            let name = match other.subject.as_str() {
                "raw-floor" => "raw".to_owned(),
                s => s.to_owned(),
            };
            for (_, op) in OPS {
                let metric = format!("{op}_per_s");
                if let (Some(c), Some(r)) = (coord.get(&metric), other.get(&metric)) {
                    coord.set(&format!("x_{name}_{op}"), c / r);
                }
            }
        }
    }
    rows.push(watch_latency(t, &name, deliveries).await?);
    Ok(rows)
}

/// Put sent by one client → the event delivered to another's watch, one at a time.
async fn watch_latency(t: &Target, name: &str, deliveries: usize) -> Result<Row> {
    let (writer, reader) = (t.coord().await?, t.coord().await?);
    let prefix = format!("{name}/watched");
    let mut events = reader.watch(&prefix).await?;
    let key = format!("{prefix}/k");
    let mut lat = Latencies::default();
    for i in 0..deliveries {
        let value = i.to_string().into_bytes();
        let start = Instant::now();
        writer.put(&key, value.clone()).await?;
        loop {
            let event = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .context("no watch event within 10 s")?
                .context("the watch ended")??;
            if matches!(&event, ConfigEvent::Put(e) if e.value == value) {
                break;
            }
        }
        lat.push(start.elapsed());
    }
    let _ = writer.close().await;
    let _ = reader.close().await;
    Ok(Row::new("config", t.name(), "coord-watch")
        .with("delivery_p50_ms", lat.ms(0.5))
        .with("delivery_p99_ms", lat.ms(0.99)))
}
