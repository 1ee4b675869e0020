//! Reads shared by the config store and the registry: a directory's children, and the
//! data of many nodes in chunked `multi` reads (one request per chunk, each well under
//! ZooKeeper's packet limit).

use coord_core::Result;
use coord_core::raw::Counter;
use zookeeper_client as zk;

use crate::error::map_at;
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
        Err(e) => Err(map_at(e, op, false, dir)),
    }
}

/// The data and stat of each path, in order; `None` for a node that is gone.
///
/// # Errors
///
/// A node that exists but cannot be read (its ACL refuses these credentials) fails the
/// whole read with `PermissionDenied` naming it: it is never reported as absent.
pub(crate) async fn data_of(
    inner: &Inner,
    paths: &[String],
    op: &'static str,
) -> Result<Vec<Option<(Vec<u8>, zk::Stat)>>> {
    let mut out = Vec::with_capacity(paths.len());
    for chunk_paths in paths.chunks(CHUNK) {
        let chunk = chunk_paths.to_vec();
        let results = inner
            .call_mapped(Counter::Txn, op, false, |zk| async move {
                let mut reader = zk.new_multi_reader();
                for p in &chunk {
                    reader.add_get_data(p)?;
                }
                reader.commit().await
            })
            .await?;
        for (result, path) in results.into_iter().zip(chunk_paths) {
            out.push(match result {
                zk::MultiReadResult::Data { data, stat } => Some((data, stat)),
                zk::MultiReadResult::Error {
                    err: zk::Error::NoNode,
                } => None,
                zk::MultiReadResult::Error { err } => return Err(map_at(err, op, false, path)),
                _ => None,
            });
        }
    }
    Ok(out)
}
