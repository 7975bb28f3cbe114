//! The per-endpoint circuit breaker.

use std::time::{Duration, Instant};

/// A circuit breaker for one endpoint: closed while deliveries succeed,
/// open (sending nothing) for a cool-down after too many consecutive
/// failures, then half-open with a few probes; enough successful probes
/// close it, any failed one opens it again.
///
/// ```
/// use std::time::{Duration, Instant};
/// use hooklatch::sender::rules::Breaker;
///
/// let mut breaker = Breaker::new(); // 5 failures, 30 s, 3 probes, 3 successes
/// let now = Instant::now();
/// for _ in 0..5 {
///     breaker.try_acquire(now).unwrap();
///     breaker.on_failure(now);
/// }
/// assert!(breaker.try_acquire(now).is_err()); // open: nothing is sent
/// assert!(breaker.try_acquire(now + Duration::from_secs(30)).is_ok()); // a probe
/// ```
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Breaker {
    failure_threshold: u32,
    cool_down: Duration,
    max_probes: u32,
    successes_to_close: u32,
    // The running state is each process's own: a stored breaker starts
    // closed.
    #[serde(skip)]
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen { in_flight: u32, successes: u32 },
}

impl Default for State {
    fn default() -> Self {
        Self::Closed { failures: 0 }
    }
}

/// The breaker's state, for logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Deliveries flow.
    Closed,
    /// Nothing is sent until the cool-down ends.
    Open,
    /// A few probes test the endpoint.
    HalfOpen,
}

impl Default for Breaker {
    fn default() -> Self {
        Self::new()
    }
}

impl Breaker {
    /// Opens after 5 consecutive failures for 30 s, then allows up to 3
    /// probes, and closes after 3 successes.
    pub fn new() -> Self {
        Self {
            failure_threshold: 5,
            cool_down: Duration::from_secs(30),
            max_probes: 3,
            successes_to_close: 3,
            state: State::Closed { failures: 0 },
        }
    }

    /// This breaker with its limits applied as the `with_` methods apply
    /// them, for one read back from a store.
    pub(crate) fn normalized(mut self) -> Self {
        self.failure_threshold = self.failure_threshold.max(1);
        self.max_probes = self.max_probes.max(1);
        self.successes_to_close = self.successes_to_close.max(1);
        self
    }

    /// Opens after `failures` consecutive failures. Defaults to 5.
    #[must_use]
    pub fn with_failure_threshold(mut self, failures: u32) -> Self {
        self.failure_threshold = failures.max(1);
        self
    }

    /// Stays open for `cool_down`. Defaults to 30 seconds.
    #[must_use]
    pub fn with_cool_down(mut self, cool_down: Duration) -> Self {
        self.cool_down = cool_down;
        self
    }

    /// Allows `probes` attempts at once while half-open, and closes after
    /// as many successes. Defaults to 3.
    #[must_use]
    pub fn with_probes(mut self, probes: u32) -> Self {
        self.max_probes = probes.max(1);
        self.successes_to_close = probes.max(1);
        self
    }

    /// How long it stays open. A copy on another time scale keeps the
    /// other limits:
    ///
    /// ```
    /// use std::time::Duration;
    /// use hooklatch::sender::rules::Breaker;
    ///
    /// let breaker = Breaker::new().with_failure_threshold(20);
    /// let faster = breaker.clone().with_cool_down(breaker.cool_down() / 3600);
    /// assert_eq!(faster.cool_down(), Duration::from_secs(30) / 3600);
    /// ```
    pub fn cool_down(&self) -> Duration {
        self.cool_down
    }

    /// The state at `now`.
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            State::Closed { .. } => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// Asks to send one attempt at `now`. `Err` holds how long until the
    /// breaker lets anything through.
    pub fn try_acquire(&mut self, now: Instant) -> Result<(), Duration> {
        match self.state {
            State::Closed { .. } => Ok(()),
            State::Open { until } if now < until => Err(until - now),
            State::Open { .. } => {
                self.state = State::HalfOpen {
                    in_flight: 1,
                    successes: 0,
                };
                Ok(())
            }
            State::HalfOpen {
                in_flight,
                successes,
            } if in_flight + successes < self.max_probes => {
                self.state = State::HalfOpen {
                    in_flight: in_flight + 1,
                    successes,
                };
                Ok(())
            }
            // All probes are out: wait for their answers.
            State::HalfOpen { .. } => Err(Duration::from_secs(1)),
        }
    }

    /// Records a successful attempt.
    pub fn on_success(&mut self, _now: Instant) {
        self.state = match self.state {
            State::HalfOpen { successes, .. } if successes + 1 >= self.successes_to_close => {
                State::Closed { failures: 0 }
            }
            State::HalfOpen {
                in_flight,
                successes,
            } => State::HalfOpen {
                in_flight: in_flight.saturating_sub(1),
                successes: successes + 1,
            },
            State::Closed { .. } | State::Open { .. } => State::Closed { failures: 0 },
        };
    }

    /// Gives back a pass that sent nothing (the attempt could not even be
    /// signed): no verdict on the endpoint. A half-open breaker's probe is
    /// free again; a closed breaker's count is unchanged.
    pub fn release(&mut self) {
        if let State::HalfOpen {
            in_flight,
            successes,
        } = self.state
        {
            self.state = State::HalfOpen {
                in_flight: in_flight.saturating_sub(1),
                successes,
            };
        }
    }

    /// Records a failed attempt.
    pub fn on_failure(&mut self, now: Instant) {
        let open = State::Open {
            until: now + self.cool_down,
        };
        self.state = match self.state {
            State::Closed { failures } if failures + 1 >= self.failure_threshold => open,
            State::Closed { failures } => State::Closed {
                failures: failures + 1,
            },
            State::HalfOpen { .. } | State::Open { .. } => open,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_sends_nothing_probes_closes_and_reopens() {
        let start = Instant::now();
        let mut breaker = Breaker::new();
        for _ in 0..4 {
            breaker.try_acquire(start).unwrap();
            breaker.on_failure(start);
        }
        assert_eq!(breaker.state(start), BreakerState::Closed);
        breaker.on_failure(start);
        assert_eq!(breaker.state(start), BreakerState::Open);
        assert_eq!(
            breaker.try_acquire(start + Duration::from_secs(10)),
            Err(Duration::from_secs(20))
        );

        // Half-open: three probes, no fourth until one answers.
        let later = start + Duration::from_secs(30);
        for _ in 0..3 {
            breaker.try_acquire(later).unwrap();
        }
        assert!(breaker.try_acquire(later).is_err());
        breaker.on_success(later);
        breaker.on_success(later);
        assert_eq!(breaker.state(later), BreakerState::HalfOpen);
        breaker.on_success(later);
        assert_eq!(breaker.state(later), BreakerState::Closed);

        // A failed probe reopens it for a whole cool-down.
        for _ in 0..5 {
            breaker.on_failure(later);
        }
        let probe_time = later + Duration::from_secs(30);
        breaker.try_acquire(probe_time).unwrap();
        breaker.on_failure(probe_time);
        assert_eq!(breaker.state(probe_time), BreakerState::Open);
        assert!(
            breaker
                .try_acquire(probe_time + Duration::from_secs(29))
                .is_err()
        );
    }

    #[test]
    fn a_released_probe_frees_its_slot_without_a_verdict() {
        let now = Instant::now();
        let mut breaker = Breaker::new().with_failure_threshold(1).with_probes(1);
        breaker.on_failure(now);
        let later = now + Duration::from_secs(30);
        breaker.try_acquire(later).unwrap();
        assert!(breaker.try_acquire(later).is_err(), "the one probe is out");
        breaker.release();
        assert_eq!(breaker.state(later), BreakerState::HalfOpen);
        breaker.try_acquire(later).expect("the probe is free again");
        breaker.on_success(later);
        assert_eq!(breaker.state(later), BreakerState::Closed);

        // Closed: a release changes nothing.
        breaker.release();
        assert_eq!(breaker.state(later), BreakerState::Closed);
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let now = Instant::now();
        let mut breaker = Breaker::new().with_failure_threshold(3);
        breaker.on_failure(now);
        breaker.on_failure(now);
        breaker.on_success(now);
        breaker.on_failure(now);
        breaker.on_failure(now);
        assert_eq!(breaker.state(now), BreakerState::Closed);
        breaker.on_failure(now);
        assert_eq!(breaker.state(now), BreakerState::Open);
    }
}
