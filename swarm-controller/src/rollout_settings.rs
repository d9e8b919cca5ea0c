//! The swarm file's `[rollout]` table, and how its waves split a list of
//! hives (pure).
//!
//! Waves are cumulative: `["1", "10%", "100%"]` means "one hive first, then
//! up to a tenth of them, then all". A percentage is of the hives the
//! rollout changes, rounded up, so `10%` of 6 hives is 1. A wave that would
//! add no hive is dropped, and hives beyond the last wave form one more, so
//! a rollout always ends with every changed hive written.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default `wait_converged_secs`: how long one wave may take to converge.
pub const DEFAULT_WAIT_CONVERGED_SECS: u64 = 600;
/// Default `lease_secs`: a running rollout whose state was not written for
/// this long has lost its controller, and `resume` may take it over.
pub const DEFAULT_LEASE_SECS: u64 = 30;
/// Default `min_converged_secs`: how long each hive of a wave must stay
/// converged, with no exit of an agent, before the wave counts as done.
pub const DEFAULT_MIN_CONVERGED_SECS: u64 = 30;

/// The `[rollout]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRollout {
    waves: Vec<String>,
    #[serde(default)]
    max_failed: usize,
    #[serde(default = "default_wait")]
    wait_converged_secs: u64,
    #[serde(default = "default_lease")]
    lease_secs: u64,
    #[serde(default = "default_min_converged")]
    min_converged_secs: u64,
}

/// One wave's cumulative size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaveSize {
    /// Up to this many hives in all.
    Count(usize),
    /// Up to this percentage of the changed hives in all (rounded up).
    Percent(u8),
}

impl std::fmt::Display for WaveSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaveSize::Count(n) => write!(f, "{n}"),
            WaveSize::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A checked `[rollout]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutSettings {
    pub waves: Vec<WaveSize>,
    /// Failed or degraded hives tolerated over the whole rollout; one more
    /// halts it.
    pub max_failed: usize,
    /// How long each wave may take to be fresh and converged.
    pub wait_converged_secs: u64,
    /// See [`DEFAULT_LEASE_SECS`].
    pub lease_secs: u64,
    /// See [`DEFAULT_MIN_CONVERGED_SECS`]; 0: done as soon as converged.
    /// A state stored before this setting existed reads as 0, the rule it
    /// was started under.
    #[serde(default)]
    pub min_converged_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("waves is empty; give at least one, for example waves = [\"1\", \"100%\"]")]
    NoWaves,
    #[error("wave {0:?} is neither a count of hives (\"3\") nor a percentage (\"10%\")")]
    Unreadable(String),
    #[error("wave {0:?} is zero; a wave writes at least one hive")]
    Zero(String),
    #[error("wave {0:?} is over 100%")]
    OverHundred(String),
    #[error("{field} = 0; it must be at least 1 second")]
    ZeroSecs { field: &'static str },
    #[error(
        "min_converged_secs = {min} is not below wait_converged_secs = {wait}: \
         every wave would run out of time while it soaks"
    )]
    SoakTooLong { min: u64, wait: u64 },
}

impl RolloutSettings {
    pub(crate) fn from_raw(raw: RawRollout) -> Result<Self, SettingsError> {
        if raw.waves.is_empty() {
            return Err(SettingsError::NoWaves);
        }
        let waves = raw
            .waves
            .iter()
            .map(|w| parse_wave(w))
            .collect::<Result<_, _>>()?;
        for (field, value) in [
            ("wait_converged_secs", raw.wait_converged_secs),
            ("lease_secs", raw.lease_secs),
        ] {
            if value == 0 {
                return Err(SettingsError::ZeroSecs { field });
            }
        }
        if raw.min_converged_secs >= raw.wait_converged_secs {
            return Err(SettingsError::SoakTooLong {
                min: raw.min_converged_secs,
                wait: raw.wait_converged_secs,
            });
        }
        Ok(RolloutSettings {
            waves,
            max_failed: raw.max_failed,
            wait_converged_secs: raw.wait_converged_secs,
            lease_secs: raw.lease_secs,
            min_converged_secs: raw.min_converged_secs,
        })
    }

    pub fn wait_converged(&self) -> Duration {
        Duration::from_secs(self.wait_converged_secs)
    }

    pub fn lease(&self) -> Duration {
        Duration::from_secs(self.lease_secs)
    }

    pub fn min_converged(&self) -> Duration {
        Duration::from_secs(self.min_converged_secs)
    }
}

impl Default for RolloutSettings {
    /// Without a `[rollout]` table: one canary, then everything.
    fn default() -> Self {
        RolloutSettings {
            waves: vec![WaveSize::Count(1), WaveSize::Percent(100)],
            max_failed: 0,
            wait_converged_secs: DEFAULT_WAIT_CONVERGED_SECS,
            lease_secs: DEFAULT_LEASE_SECS,
            min_converged_secs: DEFAULT_MIN_CONVERGED_SECS,
        }
    }
}

/// Split `hives` (in rollout order) into waves, as the module says.
pub fn split<T: Clone>(hives: &[T], waves: &[WaveSize]) -> Vec<Vec<T>> {
    let total = hives.len();
    let mut out = Vec::new();
    let mut done = 0;
    for size in waves {
        let upto = match *size {
            WaveSize::Count(n) => n,
            WaveSize::Percent(p) => (total * usize::from(p)).div_ceil(100),
        }
        .min(total);
        if upto > done {
            out.push(hives[done..upto].to_vec());
            done = upto;
        }
    }
    if done < total {
        out.push(hives[done..].to_vec());
    }
    out
}

fn default_wait() -> u64 {
    DEFAULT_WAIT_CONVERGED_SECS
}

fn default_lease() -> u64 {
    DEFAULT_LEASE_SECS
}

fn default_min_converged() -> u64 {
    DEFAULT_MIN_CONVERGED_SECS
}

fn parse_wave(text: &str) -> Result<WaveSize, SettingsError> {
    let unreadable = || SettingsError::Unreadable(text.to_string());
    let size = match text.trim().strip_suffix('%') {
        Some(p) => {
            let p: u32 = p.trim().parse().map_err(|_| unreadable())?;
            if p > 100 {
                return Err(SettingsError::OverHundred(text.to_string()));
            }
            WaveSize::Percent(p as u8)
        }
        None => WaveSize::Count(text.trim().parse().map_err(|_| unreadable())?),
    };
    if matches!(size, WaveSize::Count(0) | WaveSize::Percent(0)) {
        return Err(SettingsError::Zero(text.to_string()));
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(n: usize, waves: &[&str]) -> Vec<usize> {
        let waves: Vec<WaveSize> = waves.iter().map(|w| parse_wave(w).unwrap()).collect();
        let hives: Vec<usize> = (0..n).collect();
        split(&hives, &waves).iter().map(Vec::len).collect()
    }

    #[test]
    fn waves_are_cumulative_and_end_with_every_hive() {
        assert_eq!(sizes(6, &["1", "50%", "100%"]), vec![1, 2, 3]);
        assert_eq!(sizes(6, &["1", "10%", "100%"]), vec![1, 5]);
        assert_eq!(
            sizes(10_000, &["1", "1%", "10%", "100%"]),
            vec![1, 99, 900, 9000]
        );
        assert_eq!(sizes(3, &["1"]), vec![1, 2]);
        assert_eq!(sizes(2, &["5", "100%"]), vec![2]);
        assert_eq!(sizes(0, &["1", "100%"]), Vec::<usize>::new());
    }

    #[test]
    fn bad_waves_are_named() {
        for (w, want) in [
            ("0", "zero"),
            ("0%", "zero"),
            ("101%", "over 100%"),
            ("ten", "neither"),
            ("-1", "neither"),
        ] {
            let e = parse_wave(w).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains(w), "{w}: {e}");
        }
    }

    fn settings(table: &str) -> Result<RolloutSettings, SettingsError> {
        let raw: RawRollout = toml::from_str(&format!("waves = [\"1\"]\n{table}")).unwrap();
        RolloutSettings::from_raw(raw)
    }

    #[test]
    fn the_soak_defaults_to_30s_may_be_off_and_must_end_before_the_wave_does() {
        assert_eq!(settings("").unwrap().min_converged_secs, 30);
        assert_eq!(
            settings("min_converged_secs = 0").unwrap().min_converged(),
            Duration::ZERO
        );
        let e = settings("min_converged_secs = 60\nwait_converged_secs = 60")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("min_converged_secs = 60") && e.contains("wait_converged_secs = 60"),
            "{e}"
        );
        // A state stored before the setting existed keeps its old rule.
        let old =
            r#"{"waves":[{"count":1}],"max_failed":0,"wait_converged_secs":600,"lease_secs":30}"#;
        let back: RolloutSettings = serde_json::from_str(old).unwrap();
        assert_eq!(back.min_converged_secs, 0);
    }
}
