//! Run with: cargo run --example sequence
//!
//! One order's events arrive shuffled and duplicated, and event 6 never
//! arrives at all. The tracker applies each event exactly once, in order;
//! the reorder buffer holds early ones until the late ones come; and when
//! the buffer's window passes without event 6, the worker refetches the
//! order from the provider and carries on from there.

use std::time::{Duration, Instant};

use hooklatch::sequence::{
    FirstEvent, Held, MemorySequences, Observation, ReorderBuffer, SequenceError, Tracker,
};

const ORDER: &str = "order_42";

/// The provider's API: the order as it is now, reflecting event 7.
fn refetch_order() -> (u64, &'static str) {
    (7, "delivered")
}

/// What happened to each event, in order.
async fn app() -> Result<Vec<String>, SequenceError> {
    let tracker = Tracker::new(MemorySequences::new()).with_first_event(FirstEvent::StartAt(1));
    let mut buffer = ReorderBuffer::new(Duration::from_millis(50));
    let start = Instant::now();
    // (arrival time in ms, sequence number, event): 6 is lost.
    let arrivals = [
        (0, 2, "paid"),
        (1, 1, "created"),
        (2, 1, "created"),
        (3, 4, "packed"),
        (4, 3, "picked"),
        (5, 2, "paid"),
        (6, 5, "shipped"),
        (7, 7, "delivered"),
        (100, 8, "reviewed"),
        (101, 3, "picked"),
    ];
    let mut log = Vec::new();
    // A single worker: its commits always advance. With several workers,
    // a `false` from commit means another applied this event first.
    let apply = async |sequence: u64, event: &str, log: &mut Vec<String>| {
        tracker.commit(ORDER, sequence).await?;
        log.push(format!("apply   #{sequence} {event}"));
        Ok::<(), SequenceError>(())
    };
    for (at_ms, sequence, event) in arrivals {
        let now = start + Duration::from_millis(at_ms);
        // Early events that waited too long: their predecessors are lost.
        for overdue in buffer.overdue(now) {
            let (position, state) = refetch_order();
            tracker.commit(&overdue.resource, position).await?;
            log.push(format!(
                "refetch {} -> #{position} {state}",
                overdue.resource
            ));
            for (held, _) in overdue.held.iter().filter(|(held, _)| *held <= position) {
                log.push(format!("skip    #{held} (covered by the refetch)"));
            }
        }
        match tracker.observe(ORDER, sequence).await? {
            Observation::Apply => {
                apply(sequence, event, &mut log).await?;
                for (next, held) in buffer.release(ORDER, sequence) {
                    apply(next, held, &mut log).await?;
                }
            }
            Observation::Stale { last } => {
                log.push(format!("skip    #{sequence} {event} (already at #{last})"));
            }
            Observation::Gap { expected, got } => match buffer
                .hold(ORDER, expected, got, event, now)
            {
                Held::Held => log.push(format!("hold    #{got} {event} (waiting for #{expected})")),
                Held::Duplicate => log.push(format!("skip    #{got} {event} (held already)")),
                Held::Refused(_) => log.push(format!("refetch needed for #{got}")),
            },
        }
    }
    Ok(log)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), SequenceError> {
    for line in app().await? {
        println!("{line}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn applies_each_event_once_in_order_and_refetches_past_the_lost_one() {
        let log = super::app().await.unwrap();
        let applied: Vec<&str> = log
            .iter()
            .filter_map(|line| line.strip_prefix("apply   "))
            .collect();
        assert_eq!(
            applied,
            [
                "#1 created",
                "#2 paid",
                "#3 picked",
                "#4 packed",
                "#5 shipped",
                "#8 reviewed"
            ]
        );
        assert!(
            log.contains(&"refetch order_42 -> #7 delivered".to_owned()),
            "{log:#?}"
        );
        assert!(
            log.contains(&"skip    #7 (covered by the refetch)".to_owned()),
            "{log:#?}"
        );
    }
}
