//! Every case, grouped by primitive, with what it needs.
//!
//! Each case is a plain `pub async fn(Ctx) -> CaseResult`. The runner awaits it to
//! completion or abandons it at the deadline; cases have no cancel-safety contract.

pub mod access;
pub mod barrier;
pub mod beliefs;
pub mod cache;
pub mod cluster;
pub mod config;
pub mod counter;
pub mod double_barrier;
pub mod election;
pub mod fencing;
pub mod histories;
pub mod input;
pub mod inspect;
pub mod lock;
pub mod lock_delay;
pub mod outside_recipe;
pub mod queue;
pub mod registry;
pub mod rw_lock;
pub mod secrets;
pub mod selector;
pub mod semaphore;
pub mod server;
pub mod session;
pub mod spans;
pub mod tls;
pub mod two_phase;
pub mod watch_history;

use crate::factory::Faults;
use crate::harness::{Case, Needs};

const KILL: Needs = Needs {
    faults: Faults {
        kill_session: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const CRASH: Needs = Needs {
    faults: Faults {
        crash: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const SUSPEND: Needs = Needs {
    faults: Faults {
        suspend: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
/// A watch gap may be made by compacting the cluster's history, which every namespace
/// shares: such cases run alone.
const GAP: Needs = Needs {
    faults: Faults {
        watch_gap: true,
        ..Needs::NONE.faults
    },
    exclusive: true,
    ..Needs::NONE
};
/// Checks that nothing is left on the server: ZooKeeper must sweep empty containers
/// quickly.
const OPERATOR_AND_SWEEP: Needs = Needs {
    faults: Faults {
        operator: true,
        ..Needs::NONE.faults
    },
    settings: crate::harness::ServerSettings {
        fast_container_sweep: true,
    },
    ..Needs::NONE
};
const KILL_AND_OPERATOR: Needs = Needs {
    faults: Faults {
        kill_session: true,
        operator: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const OPERATOR: Needs = Needs {
    faults: Faults {
        operator: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const OPERATOR_AND_DELAY: Needs = Needs {
    faults: Faults {
        operator: true,
        delay: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
/// Switches process-wide mutants on: runs alone.
#[cfg(feature = "mutants")]
const OPERATOR_AND_DELAY_ALONE: Needs = Needs {
    exclusive: true,
    ..OPERATOR_AND_DELAY
};
const GAP_AND_OPERATOR: Needs = Needs {
    faults: Faults {
        watch_gap: true,
        operator: true,
        ..Needs::NONE.faults
    },
    exclusive: true,
    ..Needs::NONE
};
const BLACKHOLE: Needs = Needs {
    faults: Faults {
        blackhole: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
/// The watch histories: a foreign writer, slowed links, and one watcher cut off and
/// then its session killed.
const WATCH_HISTORY: Needs = Needs {
    faults: Faults {
        operator: true,
        delay: true,
        suspend: true,
        kill_session: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
/// Slowed links with process-wide mutants switched on: alone.
#[cfg(feature = "mutants")]
const DELAY_ALONE: Needs = Needs {
    exclusive: true,
    ..DELAY
};
/// The watch histories with process-wide mutants switched on: alone.
#[cfg(feature = "mutants")]
const WATCH_HISTORY_ALONE: Needs = Needs {
    exclusive: true,
    ..WATCH_HISTORY
};
/// The watch mutants' negative control: alone, with room for several histories. A
/// history that catches the mutant by the last write it holds back waits twice the
/// expiry wait for it (on a 3-member ZooKeeper under member faults: 4–35 s a history,
/// measured), and a history whose watcher lost its session hides the ZooKeeper mutant,
/// so under member faults several may run: two slow ones already pass one case's 60 s
/// (what failed CI once). A history is bounded by about four expiry waits (about 90 s
/// there); 600 s leaves room for six or more, and the case stops starting histories
/// after 480 s, so that running out says so in its own words.
#[cfg(feature = "mutants")]
const WATCH_MUTANTS: Needs = Needs {
    deadline: std::time::Duration::from_secs(600),
    ..WATCH_HISTORY_ALONE
};
const DELAY: Needs = Needs {
    faults: Faults {
        delay: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const REPLY_LOSS: Needs = Needs {
    faults: Faults {
        reply_loss: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const REPLY_LOSS_AND_KILL: Needs = Needs {
    faults: Faults {
        reply_loss: true,
        kill_session: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const EVERY_WATCH_EVENT: Needs = Needs {
    every_watch_event: true,
    ..Needs::NONE
};
const LINKS: Needs = Needs {
    faults: Faults {
        links: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const LINKS_AND_OPERATOR: Needs = Needs {
    faults: Faults {
        links: true,
        operator: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const MEMBERS: Needs = Needs {
    faults: Faults {
        member_faults: true,
        ..Needs::NONE.faults
    },
    ..Needs::NONE
};
const EVERY_LEADER: Needs = Needs {
    every_leader_change: true,
    ..Needs::NONE
};

macro_rules! case {
    ($module:ident :: $name:ident) => {
        case!($module::$name, Needs::NONE)
    };
    ($module:ident :: $name:ident, $needs:expr) => {
        Case {
            name: concat!(stringify!($module), "::", stringify!($name)),
            needs: $needs,
            run: |ctx| Box::pin($module::$name(ctx)),
        }
    };
}

/// The whole suite.
/// One or two cases per primitive, for a backend reached another way (over TLS, with
/// credentials) whose full suite already runs in plain form: lock exclusion and hand-over,
/// election, registry with a watch, config with compare-and-set and a watch, a fenced
/// write, and a crashed holder's lock passing on.
pub fn smoke() -> Vec<Case> {
    const NAMES: &[&str] = &[
        "lock::acquire_and_release",
        "lock::mutual_exclusion_under_contention",
        "lock::crashed_holder_passes_on",
        "fencing::holder_guarded_write_succeeds",
        "fencing::released_guard_is_fenced",
        "election::resign_hands_over",
        "election::proclaim_updates_value",
        "registry::register_and_list",
        "registry::watch_snapshot_then_changes",
        "config::put_get_delete",
        "config::cas_rejects_stale_version",
        "config::commit_all_or_nothing",
        "config::watch_delivers_final_value",
        "session::close_releases_everything",
    ];
    all().into_iter().filter(|c| NAMES.contains(&c.name)).collect()
}

/// Every shared case.
pub fn all() -> Vec<Case> {
    vec![
        case!(lock::revocation_reaches_the_holder),
        case!(lock::acquire_and_release),
        case!(lock::try_lock_none_when_held),
        case!(lock::try_lock_after_dropping_own_guard_gets_it),
        case!(lock::holder_is_visible),
        case!(lock::mutual_exclusion_under_contention),
        case!(lock::fifo_order),
        case!(lock::tokens_increase_across_holders),
        case!(lock::killed_holder_passes_on, KILL),
        case!(lock::crashed_holder_passes_on, CRASH),
        case!(lock::dropped_lock_future_leaves_no_contender),
        case!(lock::dropped_guard_releases),
        case!(lock::herd_free_one_wakeup_per_release),
        case!(
            beliefs::held_beliefs_never_overlap_under_faults,
            KILL_AND_OPERATOR
        ),
        case!(
            histories::config_histories_beside_a_foreign_writer,
            OPERATOR_AND_DELAY
        ),
        case!(histories::queue_history_with_closes_mid_take, DELAY),
        case!(
            watch_history::watch_histories_beside_a_foreign_writer,
            WATCH_HISTORY
        ),
        case!(lock::guard_reports_lost_on_session_kill, KILL),
        case!(lock::tokens_increase_across_session_loss, KILL),
        case!(lock::same_client_queues_locally),
        case!(lock::related_names_are_independent),
        case!(lock::uncontended_round_trips),
        case!(lock::release_during_outage_is_retried, SUSPEND),
        case!(lock::try_calls_fail_fast_during_an_outage, SUSPEND),
        case!(lock::try_calls_fail_fast_during_a_silent_partition, BLACKHOLE),
        case!(lock::holder_entry_deleted_reports_lost, OPERATOR),
        case!(lock::refused_fence_means_lost, OPERATOR),
        case!(lock::waiter_entry_deleted_is_never_a_valid_grant, OPERATOR),
        case!(lock::deleted_holder_release_spares_the_next_grant, OPERATOR),
        case!(
            lock::holder_entry_deleted_during_gap_reports_lost,
            GAP_AND_OPERATOR
        ),
        case!(lock::distinct_names_leave_nothing_behind, OPERATOR_AND_SWEEP),
        case!(lock::ambiguous_create_is_not_made_twice, LINKS),
        case!(
            lock::late_release_never_removes_a_newer_contender,
            LINKS_AND_OPERATOR
        ),
        case!(rw_lock::readers_share_writer_waits),
        case!(rw_lock::queued_writer_blocks_later_readers),
        case!(rw_lock::readers_of_one_client_share),
        case!(rw_lock::writers_exclude_under_contention),
        case!(rw_lock::crashed_writer_passes_on, CRASH),
        case!(rw_lock::killed_reader_passes_on, KILL),
        case!(rw_lock::dropped_write_future_leaves_no_contender),
        case!(rw_lock::reader_watches_only_the_nearest_writer),
        case!(rw_lock::independent_of_the_plain_lock),
        case!(rw_lock::waiter_session_lost_fails_and_leaves_nothing, KILL),
        case!(outside_recipe::turnstile_admits_permits_in_order),
        case!(inspect::shows_every_recipe_as_it_stands),
        case!(semaphore::at_most_permits_hold),
        case!(semaphore::one_client_holds_several),
        case!(semaphore::never_more_than_permits_under_contention),
        case!(semaphore::concurrent_tries_on_an_idle_semaphore_all_hold),
        case!(semaphore::counts_never_mix_when_a_try_races_a_waiter),
        case!(semaphore::fifo_and_herd_free),
        case!(semaphore::crashed_holder_returns_its_lease, CRASH),
        case!(semaphore::killed_holder_reports_lost, KILL),
        case!(semaphore::dropped_acquire_leaves_nothing),
        case!(semaphore::permit_count_mismatch_is_an_error),
        case!(semaphore::waiter_session_lost_fails_and_leaves_nothing, KILL),
        case!(semaphore::waiter_entry_deleted_is_never_a_valid_grant, OPERATOR),
        case!(counter::adds_are_atomic_under_contention),
        case!(counter::get_set_add),
        case!(counter::watch_follows_the_value),
        case!(counter::fenced_writes_refused_after_release),
        case!(counter::non_counter_values_are_errors),
        case!(selector::work_that_returns_hands_over),
        case!(selector::lost_term_cancels_work_and_requeues, KILL),
        case!(selector::lost_term_work_notes_its_loss, KILL),
        case!(selector::lost_term_work_ends_before_the_next_term, BLACKHOLE),
        case!(selector::panicking_work_ends_the_term),
        case!(selector::stop_and_drop_resign),
        case!(barrier::waiters_go_on_when_removed),
        case!(barrier::removal_during_outage_is_seen, SUSPEND),
        case!(queue::fifo_push_take),
        case!(queue::racing_consumers_take_each_item_once),
        case!(queue::take_waits_for_a_push),
        case!(queue::push_beyond_the_bound_fails),
        case!(queue::dropped_take_leaves_nothing),
        case!(queue::nested_names_keep_their_items),
        case!(queue::push_and_len_cost_does_not_grow_with_the_queue),
        case!(queue::keys_among_the_items_are_not_items),
        case!(queue::tail_deleted_by_hand_keeps_order),
        case!(queue::take_waits_on_when_an_operator_deletes_its_item),
        case!(queue::push_after_the_last_sequence_fails),
        case!(queue::dropped_takes_lose_no_item),
        case!(queue::closing_after_dropped_takes_loses_no_item),
        case!(queue::crashed_consumer_passes_on, CRASH),
        case!(queue::push_notifies_at_most_two_consumers),
        case!(queue::waiter_session_lost_fails_and_takes_nothing, KILL),
        case!(double_barrier::members_enter_and_leave_together),
        case!(double_barrier::missing_member_times_out_and_is_named),
        case!(double_barrier::crashed_member_counts_as_left, CRASH),
        case!(double_barrier::member_still_inside_is_named),
        case!(double_barrier::dropped_enter_leaves_nothing),
        case!(double_barrier::waiter_session_lost_fails_and_does_not_count, KILL),
        case!(two_phase::all_commit_commits),
        case!(two_phase::one_abort_aborts),
        case!(two_phase::missing_vote_aborts_at_the_deadline),
        case!(
            two_phase::crashed_coordinator_aborts_at_the_participants_deadline,
            CRASH
        ),
        case!(two_phase::vote_goes_with_the_session, CRASH),
        case!(two_phase::one_coordinator_at_a_time),
        case!(two_phase::stale_coordinator_cannot_decide, KILL),
        case!(
            two_phase::landed_decision_is_reported_after_session_loss,
            REPLY_LOSS_AND_KILL
        ),
        case!(
            two_phase::coordinator_rides_out_lost_replies_before_deciding,
            REPLY_LOSS
        ),
        case!(fencing::holder_guarded_write_succeeds),
        case!(fencing::stale_lock_holder_is_fenced, KILL),
        case!(fencing::released_guard_is_fenced),
        case!(fencing::stale_leader_is_fenced),
        case!(fencing::is_current_follows_the_grant, KILL),
        case!(fencing::is_current_false_marks_the_guard_lost, OPERATOR),
        case!(fencing::fence_failure_takes_precedence),
        case!(lock_delay::release_hands_over_at_once),
        case!(lock_delay::deleted_holder_holds_off, OPERATOR),
        case!(
            lock_delay::without_it_a_deleted_holder_hands_over_at_once,
            OPERATOR
        ),
        case!(lock_delay::killed_leader_holds_off, KILL),
        case!(lock_delay::deleted_lease_holds_off, OPERATOR),
        case!(lock_delay::killed_holder_after_an_earlier_release_holds_off, KILL),
        case!(
            lock_delay::deleted_holder_after_an_earlier_release_holds_off,
            OPERATOR
        ),
        case!(lock_delay::same_client_waiter_holds_off, OPERATOR),
        case!(lock_delay::overlong_lock_delay_is_refused),
        case!(lock_delay::closed_holder_hands_over_at_once),
        case!(lock_delay::same_client_release_with_a_watched_hold_hands_over_at_once),
        case!(lock_delay::same_client_waiter_cancelled_during_hold_off, OPERATOR),
        case!(lock_delay::try_after_a_lost_session_answers_at_once, KILL),
        case!(lock_delay::cancelled_during_hold_off, OPERATOR),
        case!(lock_delay::own_entry_deleted_during_hold_off, OPERATOR),
        case!(election::sole_candidate_leads),
        case!(election::no_leader_when_empty),
        case!(election::resign_hands_over),
        case!(election::leader_crash_failover, KILL),
        case!(election::crashed_leader_replaced, CRASH),
        case!(election::observe_every_leader_and_no_leader, EVERY_LEADER),
        case!(election::observe_converges_monotonic),
        case!(election::proclaim_updates_value),
        case!(election::dropped_campaign_leaves_no_candidate),
        case!(election::tokens_increase_across_session_loss, KILL),
        case!(election::dropped_leadership_resigns),
        case!(election::handover_round_trips),
        case!(election::observe_reports_resync_on_gap, GAP),
        case!(registry::register_and_list),
        case!(registry::deregister_removes),
        case!(registry::dropped_registration_removes),
        case!(registry::duplicate_id_rejected),
        case!(registry::failed_register_leaves_no_ghost, LINKS),
        case!(registry::update_is_visible),
        case!(registry::crashed_member_disappears, CRASH),
        case!(registry::reregisters_after_session_loss, KILL),
        case!(registry::watch_snapshot_then_changes),
        case!(registry::watch_sees_crash_departure, CRASH),
        case!(registry::watch_snapshot_is_taken_at_call),
        case!(registry::watch_resync_on_gap, GAP),
        case!(registry::reregistration_waits_for_a_taken_id, SUSPEND),
        case!(registry::deregister_during_outage_is_retried, SUSPEND),
        case!(registry::watch_follows_changes_after_a_reconnect, SUSPEND),
        case!(config::put_get_delete),
        case!(config::typed_values),
        case!(config::cas_rejects_stale_version),
        case!(config::cas_create_if_absent),
        case!(config::cas_detects_recreate),
        case!(config::list_prefix_is_segment_wise),
        case!(config::commit_all_or_nothing),
        case!(config::contended_puts_all_succeed),
        case!(config::list_ignores_writes_to_other_keys),
        case!(config::watch_snapshot_then_ordered_changes, EVERY_WATCH_EVENT),
        case!(config::watch_delivers_final_value),
        case!(config::watch_key_is_segment_wise),
        case!(config::watch_resync_on_gap, GAP),
        case!(config::watch_snapshot_is_taken_at_call),
        case!(config::watches_of_one_prefix_share_their_reads),
        case!(config::watch_joining_a_busy_prefix_returns, DELAY),
        case!(config::watch_joining_beside_other_prefixes_is_fresh, DELAY),
        case!(
            config::watch_joining_during_an_outage_does_not_wait_it_out,
            SUSPEND
        ),
        case!(config::watch_follows_changes_after_a_reconnect, SUSPEND),
        case!(config::applied_commit_is_never_reported_not_applied, LINKS),
        case!(cache::config_cache_follows_its_prefix),
        case!(cache::service_cache_follows_registrations),
        case!(cache::service_cache_sees_a_crashed_member_leave, CRASH),
        case!(cache::caches_follow_through_session_loss, KILL),
        case!(cache::config_cache_resyncs_after_a_gap, GAP),
        case!(cache::service_cache_resyncs_after_a_gap, GAP),
        case!(cache::config_cache_shows_only_states_that_existed),
        case!(cache::config_cache_never_mixes_commits_above_64_keys),
        case!(config::watch_snapshot_of_many_keys_is_one_moment),
        case!(
            cache::config_cache_shows_only_states_that_existed_through_reconnects,
            LINKS
        ),
        case!(cache::caches_end_when_the_client_closes),
        case!(cache::dropped_cache_stops_its_task),
        case!(cache::caches_reject_bad_names),
        case!(session::starts_connected),
        case!(session::kill_reported_then_new_session, KILL),
        case!(session::short_suspension_keeps_session, SUSPEND),
        case!(session::long_suspension_reports_lost_before_takeover, SUSPEND),
        case!(session::close_releases_everything),
        case!(session::stats_count_requests),
        case!(session::dropping_last_handle_ends_session),
        case!(session::close_ends_every_stream),
        case!(session::blackholed_holder_lost_before_handover, BLACKHOLE),
        case!(session::short_blackhole_keeps_session, BLACKHOLE),
        case!(session::delayed_link_keeps_working, DELAY),
        case!(cluster::dead_member_in_url_is_skipped, LINKS),
        case!(cluster::client_follows_the_live_member, LINKS),
        case!(cluster::short_cut_of_every_link_keeps_session, LINKS),
        case!(cluster::member_killed_clients_keep_working, MEMBERS),
        case!(cluster::clients_open_while_members_die, MEMBERS),
        case!(input::bad_names_rejected_everywhere),
        case!(input::oversized_values_rejected),
        case!(input::bad_transactions_rejected),
        case!(input::bad_connection_strings_rejected),
    ]
}

/// The cases that switch a backend's own mutants on (see
/// [`histories::config_histories_catch_the_backend_mutants`]): for the suites of the
/// backends that have them (ZooKeeper, etcd), never for another, where the mutant
/// changes nothing.
#[cfg(feature = "mutants")]
pub fn backend_mutants() -> Vec<Case> {
    vec![
        case!(
            histories::config_histories_catch_the_backend_mutants,
            OPERATOR_AND_DELAY_ALONE
        ),
        case!(
            watch_history::watch_histories_catch_the_backend_mutants,
            WATCH_MUTANTS
        ),
        case!(histories::queue_history_catches_take_without_receipt, DELAY_ALONE),
    ]
}
