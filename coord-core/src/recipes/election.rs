//! The election: a queue of candidates holding their values; the first leads. Leader
//! observation turns the backend's head changes into [`LeaderEvent`]s: no duplicates,
//! tokens never going back, gaps reported.

use async_trait::async_trait;
use futures::StreamExt;
use futures::stream::BoxStream;
use tracing::Instrument;

use crate::client::Client;
use crate::election::{Election, LeaderEvent, LeaderInfo, Leadership};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::name::{validate_name, validate_value};
use crate::raw::{Admission, EntryClass, HeadEvent, QueueSpec};
use crate::recipes::contender::acquire;
use crate::recipes::lock::no_grant;

/// An election's candidates: Curator's `LeaderLatch` (`latch-`).
const CANDIDATES: &[EntryClass] = &[EntryClass {
    subdir: "",
    markers: &["latch-"],
    kazoo_marker: None,
}];

/// The queue of election `name`: `elections/<name>` (Go's `concurrency.Election`
/// prefix).
pub(crate) fn queue(name: &str) -> QueueSpec {
    QueueSpec::new(
        "election",
        format!("elections/{name}"),
        CANDIDATES,
        Admission::Exclusive,
    )
}

#[async_trait]
impl Election for Client {
    async fn campaign<V>(&self, name: &str, value: V) -> Result<Leadership>
    where
        V: Into<Vec<u8>> + Send,
        Self: Sized,
    {
        let value = value.into();
        validate_name("election name", name).map_err(|e| e.with_operation("campaign"))?;
        validate_value("leader value", &value).map_err(|e| e.with_operation("campaign"))?;
        let span = tracing::debug_span!("coord.campaign", backend = self.kind(), name);
        let grant = acquire(self, queue(name), value.clone(), true)
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("campaign"))?
            .ok_or_else(|| no_grant("campaign"))?;
        Ok(Leadership::new(name, value, grant))
    }

    async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        validate_name("election name", name).map_err(|e| e.with_operation("leader"))?;
        let span = tracing::debug_span!("coord.leader", backend = self.kind(), name);
        self.backend()
            .head(&queue(name))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("leader"))
    }

    async fn observe(&self, name: &str) -> Result<BoxStream<'static, Result<LeaderEvent>>> {
        validate_name("election name", name).map_err(|e| e.with_operation("observe"))?;
        let span = tracing::debug_span!("coord.observe", backend = self.kind(), name);
        let heads = self
            .backend()
            .watch_head(&queue(name))
            .instrument(span)
            .await
            .map_err(|e| e.with_operation("observe"))?;
        let mut view = LeaderView::default();
        Ok(heads
            .filter_map(move |item| futures::future::ready(view.next(item)))
            .boxed())
    }
}

/// What an observer has been shown.
#[derive(Debug, Default)]
struct LeaderView {
    /// The last leader shown; `None` before the first event and after a gap.
    shown: Option<Option<LeaderInfo>>,
    /// The highest token shown: a read that returns a lower one is stale.
    highest: Option<FencingToken>,
}

impl LeaderView {
    fn next(&mut self, item: Result<HeadEvent>) -> Option<Result<LeaderEvent>> {
        match item {
            Err(e) => Some(Err(e.with_operation("observe"))),
            Ok(HeadEvent::Gap) => {
                self.shown = None;
                Some(Ok(LeaderEvent::Resync))
            }
            Ok(HeadEvent::Head(head)) => {
                if self.shown.as_ref() == Some(&head) {
                    return None;
                }
                if let (Some(info), Some(top)) = (&head, self.highest) {
                    if info.token < top {
                        return None;
                    }
                }
                if let Some(info) = &head {
                    self.highest = Some(info.token);
                }
                self.shown = Some(head.clone());
                Some(Ok(LeaderEvent::Leader(head)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(token: u64, value: &[u8]) -> Result<HeadEvent> {
        Ok(HeadEvent::Head(Some(LeaderInfo {
            token: FencingToken(token),
            value: value.to_vec(),
        })))
    }

    #[test]
    fn filters_repeats_and_stale_reads_and_reports_gaps() {
        let mut v = LeaderView::default();
        let shown = |e: Option<Result<LeaderEvent>>| e.map(|r| r.expect("no error"));
        assert_eq!(
            shown(v.next(Ok(HeadEvent::Head(None)))),
            Some(LeaderEvent::Leader(None))
        );
        assert_eq!(shown(v.next(Ok(HeadEvent::Head(None)))), None, "a repeat");
        assert!(matches!(
            shown(v.next(head(5, b"a"))),
            Some(LeaderEvent::Leader(Some(_)))
        ));
        assert_eq!(shown(v.next(head(3, b"old"))), None, "a token going back");
        assert!(shown(v.next(head(5, b"b"))).is_some(), "a proclaim is a change");
        assert_eq!(shown(v.next(Ok(HeadEvent::Gap))), Some(LeaderEvent::Resync));
        assert!(
            shown(v.next(head(5, b"b"))).is_some(),
            "after a gap the current leader is shown again"
        );
    }
}
