//! [`ReorderBuffer`]: holds events that arrived early, in bounded memory.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// How many events a buffer holds in all, by default.
pub const DEFAULT_MAX_HELD: usize = 10_000;

/// How far past the expected number an event may be and still be held, by
/// default. Anything further is a gap at once.
pub const DEFAULT_MAX_AHEAD: u64 = 1_000;

/// Holds events that arrived before their predecessors, for up to a window,
/// and hands them back in order once the missing ones arrived.
///
/// Memory is bounded: at most `max_held` events in all (default
/// [`DEFAULT_MAX_HELD`]) and none more than `max_ahead` (default
/// [`DEFAULT_MAX_AHEAD`]) past the expected number, so a flood of
/// far-future numbers is refused rather than stored. The durable position
/// stays in the [`Tracker`](super::Tracker); the buffer only saves a
/// refetch when the missing events are merely late.
///
/// ```
/// use std::time::{Duration, Instant};
/// use hooklatch::sequence::{Held, ReorderBuffer};
///
/// let mut buffer = ReorderBuffer::new(Duration::from_secs(5));
/// let now = Instant::now();
/// // Position 1 is applied; 3 and 4 arrive before 2.
/// assert_eq!(buffer.hold("order_1", 2, 4, "four", now), Held::Held);
/// assert_eq!(buffer.hold("order_1", 2, 3, "three", now), Held::Held);
/// // 2 arrives, is applied and committed: 3 and 4 follow in order.
/// assert_eq!(buffer.release("order_1", 2), vec![(3, "three"), (4, "four")]);
/// ```
#[derive(Debug)]
pub struct ReorderBuffer<T> {
    window: Duration,
    max_held: usize,
    max_ahead: u64,
    held: HashMap<String, BTreeMap<u64, (Instant, T)>>,
    len: usize,
}

/// What [`ReorderBuffer::hold`] did with an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Held<T> {
    /// Held until its predecessors arrive or the window passes.
    Held,
    /// An event with this number is held already: drop this copy.
    Duplicate,
    /// Not held (the buffer is full, or the number is too far ahead):
    /// treat it as a gap now.
    Refused(T),
}

/// A resource whose oldest held event waited longer than the window: the
/// missing events are presumed lost. Refetch the resource, commit its
/// position, and drop the held events at or below it.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overdue<T> {
    /// The resource to refetch.
    pub resource: String,
    /// The events that were held for it, in order.
    pub held: Vec<(u64, T)>,
}

impl<T> ReorderBuffer<T> {
    /// A buffer that holds early events for up to `window`.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            max_held: DEFAULT_MAX_HELD,
            max_ahead: DEFAULT_MAX_AHEAD,
            held: HashMap::new(),
            len: 0,
        }
    }

    /// Holds at most `max_held` events in all.
    #[must_use]
    pub fn with_max_held(mut self, max_held: usize) -> Self {
        self.max_held = max_held;
        self
    }

    /// Holds no event more than `max_ahead` past the expected number.
    #[must_use]
    pub fn with_max_ahead(mut self, max_ahead: u64) -> Self {
        self.max_ahead = max_ahead;
        self
    }

    /// How many events are held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no event is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Holds event `sequence` of `resource`, which the tracker reported as a
    /// gap with `expected` the number it wanted.
    pub fn hold(
        &mut self,
        resource: &str,
        expected: u64,
        sequence: u64,
        item: T,
        now: Instant,
    ) -> Held<T> {
        if sequence.saturating_sub(expected) > self.max_ahead || self.len >= self.max_held {
            return Held::Refused(item);
        }
        let events = self.held.entry(resource.to_owned()).or_default();
        if events.contains_key(&sequence) {
            return Held::Duplicate;
        }
        events.insert(sequence, (now, item));
        self.len += 1;
        Held::Held
    }

    /// After `last` was committed for `resource`: drops held events at or
    /// below it and returns those that now follow in order (`last + 1`,
    /// `last + 2`, ...). Apply and commit them in the order given.
    pub fn release(&mut self, resource: &str, last: u64) -> Vec<(u64, T)> {
        let Some(events) = self.held.get_mut(resource) else {
            return Vec::new();
        };
        let before = events.len();
        let mut ready = Vec::new();
        let mut next = last.saturating_add(1);
        let later = events.split_off(&next);
        *events = later;
        while let Some((_, item)) = events.remove(&next) {
            ready.push((next, item));
            next = next.saturating_add(1);
        }
        self.len -= before - events.len();
        if events.is_empty() {
            self.held.remove(resource);
        }
        ready
    }

    /// Removes and returns the resources whose oldest held event has
    /// waited longer than the window at `now`.
    pub fn overdue(&mut self, now: Instant) -> Vec<Overdue<T>> {
        let window = self.window;
        let expired: Vec<String> = self
            .held
            .iter()
            .filter(|(_, events)| {
                events
                    .values()
                    .any(|(since, _)| now.saturating_duration_since(*since) > window)
            })
            .map(|(resource, _)| resource.clone())
            .collect();
        expired
            .into_iter()
            .filter_map(|resource| {
                let events = self.held.remove(&resource)?;
                self.len -= events.len();
                Some(Overdue {
                    resource,
                    held: events
                        .into_iter()
                        .map(|(sequence, (_, item))| (sequence, item))
                        .collect(),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_order_and_drops_stale() {
        let mut buffer = ReorderBuffer::new(Duration::from_secs(1));
        let now = Instant::now();
        for sequence in [5, 3, 4, 9] {
            assert_eq!(buffer.hold("r", 2, sequence, sequence, now), Held::Held);
        }
        assert_eq!(buffer.hold("r", 2, 4, 4, now), Held::Duplicate);
        assert_eq!(buffer.release("r", 1), vec![]);
        assert_eq!(buffer.release("r", 3), vec![(4, 4), (5, 5)]);
        assert_eq!(buffer.len(), 1);
        assert_eq!(buffer.release("r", 9), vec![]);
        assert!(buffer.is_empty());
    }

    #[test]
    fn overdue_resources_are_handed_back() {
        let mut buffer = ReorderBuffer::new(Duration::from_millis(10));
        let start = Instant::now();
        assert_eq!(buffer.hold("a", 2, 3, "a3", start), Held::Held);
        assert_eq!(
            buffer.hold("b", 2, 3, "b3", start + Duration::from_millis(8)),
            Held::Held
        );
        let overdue = buffer.overdue(start + Duration::from_millis(15));
        assert_eq!(
            overdue,
            vec![Overdue {
                resource: "a".into(),
                held: vec![(3, "a3")]
            }]
        );
        assert_eq!(buffer.len(), 1);
    }
}
