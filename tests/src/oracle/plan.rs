//! The seeded fault schedule. A seed gives the same schedule everywhere:
//! the generator is SplitMix64, written out here, not a crate whose stream
//! may change between versions.

use std::fmt;
use std::time::Duration;

/// One kind of fault (or a plain new declaration, the everyday change the
/// faults are mixed with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// nats-server SIGKILLed, then started again on the same port and store.
    NatsRestart,
    /// A hive's private dockerd killed until a job of a declaration put
    /// meanwhile has failed (past the job retry window), then restarted.
    DockerdOutage,
    /// A hive SIGKILLed, then started again.
    HiveKill,
    /// A hive SIGSTOPped, then SIGCONTinued.
    HiveStop,
    /// An agent declared with an image its dockerd does not have, until its
    /// job has failed; then the image appears.
    ImageLate,
    /// `hyperhive-wanted` deleted and made again with the same settings,
    /// then every hive's declaration put again (with a new version).
    WantedRecreate,
    /// A container with this hive's labels and a 4 KiB+ spec label full of
    /// control characters, in the hive's own dockerd.
    HostileLabel,
    /// One hive's agent declared with a command that exits 3 after 3 s,
    /// until the hive is seen backing off; then declared healthy again.
    CrashLoop,
    /// One hive's agent declared with `memory_mb = 8` and a command that
    /// holds far more, until its dockerd reports it OOM-killed; then
    /// declared healthy again.
    Oom,
    /// A new declaration for one hive.
    Declare,
}

impl FaultKind {
    pub const FAULTS: [FaultKind; 9] = [
        FaultKind::NatsRestart,
        FaultKind::DockerdOutage,
        FaultKind::HiveKill,
        FaultKind::HiveStop,
        FaultKind::ImageLate,
        FaultKind::WantedRecreate,
        FaultKind::HostileLabel,
        FaultKind::CrashLoop,
        FaultKind::Oom,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::NatsRestart => "nats_restart",
            FaultKind::DockerdOutage => "dockerd_outage",
            FaultKind::HiveKill => "hive_sigkill",
            FaultKind::HiveStop => "hive_sigstop",
            FaultKind::ImageLate => "image_late",
            FaultKind::WantedRecreate => "wanted_recreate",
            FaultKind::HostileLabel => "hostile_label",
            FaultKind::CrashLoop => "crash_loop",
            FaultKind::Oom => "oom",
            FaultKind::Declare => "declare",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One step of the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub kind: FaultKind,
    /// The hive it hits (ignored by the swarm-wide faults).
    pub hive: usize,
    /// How long a timed fault lasts (kill, stop, nats down).
    pub hold: Duration,
    /// Whether a new declaration also adds (or drops) agent `b`.
    pub toggle_b: bool,
}

impl Step {
    /// The hives this step touches, out of `hives`.
    pub fn affects(&self, hives: usize) -> Vec<usize> {
        match self.kind {
            FaultKind::NatsRestart | FaultKind::WantedRecreate => (0..hives).collect(),
            _ => vec![self.hive],
        }
    }
}

/// SplitMix64 (Steele, Lea, Flood 2014).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.range(0, i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// Every fault kind once in a seeded order, with two new declarations
/// among them.
pub fn short_plan(seed: u64, hives: usize, stale_after: Duration) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut kinds: Vec<FaultKind> = FaultKind::FAULTS.to_vec();
    kinds.extend([FaultKind::Declare, FaultKind::Declare]);
    rng.shuffle(&mut kinds);
    kinds
        .into_iter()
        .map(|k| step(&mut rng, k, hives, stale_after))
        .collect()
}

/// `n` steps drawn at random: every fault kind alike, declarations twice
/// as often as any one fault.
pub fn long_plan(seed: u64, n: usize, hives: usize, stale_after: Duration) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut pool: Vec<FaultKind> = FaultKind::FAULTS.to_vec();
    pool.extend([FaultKind::Declare, FaultKind::Declare]);
    (0..n)
        .map(|_| {
            let k = pool[rng.range(0, pool.len() as u64) as usize];
            step(&mut rng, k, hives, stale_after)
        })
        .collect()
}

fn step(rng: &mut Rng, kind: FaultKind, hives: usize, stale_after: Duration) -> Step {
    let stale_ms = stale_after.as_millis() as u64;
    let hold = match kind {
        // Down past stale_after, so the staleness claim is tested too.
        FaultKind::HiveKill | FaultKind::HiveStop => rng.range(stale_ms + 500, stale_ms + 3000),
        FaultKind::NatsRestart => rng.range(1500, 4000),
        _ => 0,
    };
    Step {
        kind,
        hive: rng.range(0, hives as u64) as usize,
        hold: Duration::from_millis(hold),
        toggle_b: rng.range(0, 3) == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(3);

    #[test]
    fn splitmix_is_the_published_sequence() {
        // First outputs for seed 0 (from the reference implementation).
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_seed_is_one_schedule_and_the_short_one_has_every_fault() {
        for seed in [0, 1, 42, u64::MAX] {
            let a = short_plan(seed, 3, STALE);
            assert_eq!(a, short_plan(seed, 3, STALE));
            for k in FaultKind::FAULTS {
                assert_eq!(a.iter().filter(|s| s.kind == k).count(), 1, "{k} in {a:?}");
            }
            assert_eq!(a.iter().filter(|s| s.kind == FaultKind::Declare).count(), 2);
            for s in &a {
                assert!(s.hive < 3);
                if matches!(s.kind, FaultKind::HiveKill | FaultKind::HiveStop) {
                    assert!(s.hold > STALE, "{s:?}");
                }
            }
        }
        assert_ne!(short_plan(1, 3, STALE), short_plan(2, 3, STALE));
        assert_eq!(long_plan(7, 30, 3, STALE), long_plan(7, 30, 3, STALE));
    }
}
