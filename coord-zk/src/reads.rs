//! Reads shared by the config store and the registry: a directory's children, and the
//! data of many nodes in chunked `multi` reads (one request per chunk, each well under
//! ZooKeeper's packet limit).

use coord_core::{Counter, Result};
use zookeeper_client as zk;

use crate::error::map;
use crate::session::Inner;

/// How many nodes one `multi` read fetches.
const CHUNK: usize = 64;

/// The children of `dir`; none if `dir` does not exist.
pub(crate) async fn children(inner: &Inner, dir: &str, op: &'static str) -> Result<Vec<String>> {
    let d = dir.to_owned();
    match inner
        .call(Counter::Read, op, false, |zk| async move {
            zk.list_children(&d).await
        })
        .await?
    {
        Ok(c) => Ok(c),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(e) => Err(map(e, op, false)),
    }
}

/// The data and stat of each path, in order; `None` for a node that is gone.
pub(crate) async fn data_of(
    inner: &Inner,
    paths: &[String],
    op: &'static str,
) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    let mut out = Vec::with_capacity(paths.len());
    for chunk in paths.chunks(CHUNK) {
        let chunk = chunk.to_vec();
        let results = inner
            .call_mapped(Counter::Txn, op, false, |zk| async move {
                let mut reader = zk.new_multi_reader();
                for p in &chunk {
                    reader.add_get_data(p)?;
                }
                reader.commit().await
            })
            .await?;
        out.extend(results.into_iter().map(|r| match r {
            zk::MultiReadResult::Data { data, stat } => Some((data, stat)),
            _ => None,
        }));
    }
    Ok(out)
}
