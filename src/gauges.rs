//! The depth gauges both sides set: one gauge per state of a queue (an
//! inbox namespace, an endpoint's outbox), under one label naming it.

/// Sets `name{label = value, state}` to each state's count.
pub(crate) fn set_depths(
    name: &'static str,
    (label, value): (&'static str, &str),
    counts: [(&'static str, u64); 3],
) {
    for (state, count) in counts {
        #[allow(clippy::cast_precision_loss)] // Counts stay far below 2^52.
        let count = count as f64;
        metrics::gauge!(name, label => value.to_owned(), "state" => state).set(count);
    }
}
