//! A queue page's section on its cold tier: the windows kept in the store (jobs, segments,
//! bytes), the earliest first, which is the next the leader loads.

use super::html::ago;
use crate::ColdWindow;
use maud::{html, Markup};
use std::time::SystemTime;

/// Nothing for a queue without cold jobs.
pub(super) fn cold(now: SystemTime, windows: &[ColdWindow]) -> Markup {
    let jobs: u64 = windows.iter().map(|w| w.jobs).sum();
    let bytes: u64 = windows.iter().map(|w| w.bytes).sum();
    html! {
        @if !windows.is_empty() {
            h2 { "Cold tier" }
            p id="cold-summary" {
                (jobs) " jobs in " (windows.len()) " windows, " (bytes) " bytes in the store. "
                "The leader loads a window its tier's lead before the window starts."
            }
            table id="cold" {
                tr { th { "window starts" } th { "jobs" } th { "segments" } th { "bytes" } }
                @for w in windows {
                    tr {
                        td { (ago(now, w.start)) }
                        td class="n" { (w.jobs) }
                        td class="n" { (w.segments) }
                        td class="n" { (w.bytes) }
                    }
                }
            }
        }
    }
}
