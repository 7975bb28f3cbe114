//! Retry schedules: when each attempt of a delivery is made.

use std::time::Duration;

/// How a delay is randomized, so that many failed deliveries do not all
/// retry in the same second.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// Exactly the nominal delay.
    None,
    /// The nominal delay scaled by a factor drawn from
    /// `[1 - below, 1 + above]`: ±10% is `below: 0.1, above: 0.1`.
    Proportional {
        /// The largest fraction taken off.
        below: f64,
        /// The largest fraction added.
        above: f64,
    },
    /// "Full jitter": anywhere from zero to the nominal delay.
    Full,
}

impl Jitter {
    /// Applies the jitter to `nominal` with `random` drawn from `[0, 1)`.
    pub fn apply(self, nominal: Duration, random: f64) -> Duration {
        let random = random.clamp(0.0, 1.0);
        match self {
            Self::None => nominal,
            Self::Proportional { below, above } => {
                nominal.mul_f64((1.0 - below + random * (below + above)).max(0.0))
            }
            Self::Full => nominal.mul_f64(random),
        }
    }
}

/// When the attempts of a delivery are made.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Schedule {
    /// A fixed table: `delays[0]` before the first attempt (usually zero),
    /// `delays[n]` between attempt `n` and `n + 1`.
    Table {
        /// The nominal delays.
        delays: Vec<Duration>,
        /// How each delay is randomized.
        jitter: Jitter,
    },
    /// The first attempt at once, then `min(cap, base * 2^(n - 1))` before
    /// retry `n`, randomized by `jitter`.
    Exponential {
        /// The first retry's nominal delay.
        base: Duration,
        /// The largest nominal delay.
        cap: Duration,
        /// How many attempts in all, the first included.
        attempts: u32,
        /// How each delay is randomized.
        jitter: Jitter,
    },
}

const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;

fn table(seconds: &[u64], jitter: Jitter) -> Schedule {
    Schedule::Table {
        delays: seconds.iter().copied().map(Duration::from_secs).collect(),
        jitter,
    }
}

impl Schedule {
    /// Svix's published table: at once, then after 5 s, 5 min, 30 min, 2 h,
    /// 5 h, 10 h and 10 h (8 attempts over about 27.6 hours), ±10%.
    pub fn svix() -> Self {
        table(
            &[
                0,
                5,
                5 * MINUTE,
                30 * MINUTE,
                2 * HOUR,
                5 * HOUR,
                10 * HOUR,
                10 * HOUR,
            ],
            Jitter::Proportional {
                below: 0.1,
                above: 0.1,
            },
        )
    }

    /// Nine attempts at 0, 1 min, 5 min, 30 min, 2 h, 6 h, 12 h, 24 h and
    /// 24 h (about 2.8 days), ±10%: pair it with a 10 s timeout and
    /// auto-disable after 3 days.
    pub fn nine_attempts_over_three_days() -> Self {
        table(
            &[
                0,
                MINUTE,
                5 * MINUTE,
                30 * MINUTE,
                2 * HOUR,
                6 * HOUR,
                12 * HOUR,
                24 * HOUR,
                24 * HOUR,
            ],
            Jitter::Proportional {
                below: 0.1,
                above: 0.1,
            },
        )
    }

    /// One attempt and five retries after 1 min, 5 min, 30 min, 2 h and
    /// 8 h: a window of 10.6 hours. Pair it with 5 s connect and 30 s read
    /// timeouts and a breaker of 3 probes closing after 3 successes.
    pub fn five_retries_over_ten_hours() -> Self {
        table(
            &[0, MINUTE, 5 * MINUTE, 30 * MINUTE, 2 * HOUR, 8 * HOUR],
            Jitter::None,
        )
    }

    /// 0, 30 s, 2 min, 10 min, 1 h, 6 h and 24 h, each up to 10% later:
    /// pair it with auto-disable after 7 days.
    pub fn seven_attempts_over_a_day() -> Self {
        table(
            &[0, 30, 2 * MINUTE, 10 * MINUTE, HOUR, 6 * HOUR, 24 * HOUR],
            Jitter::Proportional {
                below: 0.0,
                above: 0.1,
            },
        )
    }

    /// 1 s doubling to a 1 h cap, ±25%, `attempts` in all: pair it with a
    /// breaker that opens for 24 h after 20 consecutive failures.
    pub fn exponential_to_an_hour(attempts: u32) -> Self {
        Self::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(HOUR),
            attempts,
            jitter: Jitter::Proportional {
                below: 0.25,
                above: 0.25,
            },
        }
    }

    /// The same schedule randomized by `jitter` instead.
    ///
    /// ```
    /// use hooklatch::sender::rules::{Jitter, Schedule};
    ///
    /// let steady = Schedule::svix().with_jitter(Jitter::None);
    /// assert_eq!(steady.delay(3, 0.99), steady.nominal_delay(3));
    /// ```
    #[must_use]
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        match &mut self {
            Self::Table { jitter: own, .. } | Self::Exponential { jitter: own, .. } => {
                *own = jitter;
            }
        }
        self
    }

    /// How many attempts in all, the first included.
    pub fn attempts(&self) -> u32 {
        match self {
            Self::Table { delays, .. } => u32::try_from(delays.len()).unwrap_or(u32::MAX),
            Self::Exponential { attempts, .. } => *attempts,
        }
    }

    /// The nominal delay before attempt `attempt` (1 is the first), or
    /// `None` past the last attempt.
    pub fn nominal_delay(&self, attempt: u32) -> Option<Duration> {
        if attempt == 0 || attempt > self.attempts() {
            return None;
        }
        match self {
            Self::Table { delays, .. } => delays.get(attempt as usize - 1).copied(),
            Self::Exponential { base, cap, .. } => Some(if attempt == 1 {
                Duration::ZERO
            } else {
                let doublings = (attempt - 2).min(63);
                base.checked_mul(1u32.checked_shl(doublings).unwrap_or(u32::MAX))
                    .unwrap_or(*cap)
                    .min(*cap)
            }),
        }
    }

    /// The delay before attempt `attempt`, jittered with `random` from
    /// `[0, 1)`; `None` past the last attempt.
    pub fn delay(&self, attempt: u32, random: f64) -> Option<Duration> {
        let jitter = match self {
            Self::Table { jitter, .. } | Self::Exponential { jitter, .. } => *jitter,
        };
        self.nominal_delay(attempt)
            .map(|nominal| jitter.apply(nominal, random))
    }

    /// The nominal time from the first attempt to the last: how long a
    /// receiver must remember event ids at the least.
    pub fn window(&self) -> Duration {
        (1..=self.attempts())
            .filter_map(|attempt| self.nominal_delay(attempt))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_have_their_published_windows() {
        let hours = |schedule: Schedule| schedule.window().as_secs_f64() / 3600.0;
        assert!((hours(Schedule::svix()) - 27.59).abs() < 0.01);
        assert!((hours(Schedule::five_retries_over_ten_hours()) - 10.6).abs() < 1e-9);
        assert!((hours(Schedule::nine_attempts_over_three_days()) - 68.6).abs() < 0.01);
        assert_eq!(Schedule::nine_attempts_over_three_days().attempts(), 9);
        assert_eq!(Schedule::five_retries_over_ten_hours().attempts(), 6);
        assert!((hours(Schedule::seven_attempts_over_a_day()) - 31.2).abs() < 0.01);
    }

    #[test]
    fn jitter_stays_in_its_bounds() {
        let svix = Schedule::svix();
        for random in [0.0, 0.25, 0.5, 0.999] {
            let delay = svix.delay(3, random).unwrap();
            assert!(delay >= Duration::from_secs(270) && delay <= Duration::from_secs(330));
            let later = Schedule::seven_attempts_over_a_day()
                .delay(2, random)
                .unwrap();
            assert!(later >= Duration::from_secs(30) && later <= Duration::from_secs(33));
        }
        assert_eq!(svix.delay(1, 0.7), Some(Duration::ZERO));
        assert_eq!(svix.delay(9, 0.5), None);
        assert_eq!(
            Jitter::Full.apply(Duration::from_secs(10), 0.5),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn exponential_doubles_to_its_cap() {
        let schedule = Schedule::Exponential {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(3600),
            attempts: 40,
            jitter: Jitter::None,
        };
        let delays: Vec<u64> = (1..=15)
            .map(|attempt| schedule.nominal_delay(attempt).unwrap().as_secs())
            .collect();
        assert_eq!(
            delays,
            [
                0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600
            ]
        );
        assert_eq!(schedule.nominal_delay(40), Some(Duration::from_secs(3600)));
        assert_eq!(schedule.nominal_delay(41), None);
        let jittered = Schedule::exponential_to_an_hour(10);
        for random in [0.0, 0.5, 0.999] {
            let delay = jittered.delay(5, random).unwrap();
            assert!(delay >= Duration::from_secs(6) && delay <= Duration::from_secs(10));
        }
    }
}
