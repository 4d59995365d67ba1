//! Reproducible randomness for the strategies that draw: a request's draw (a `u64` the
//! shell takes from the system's generator) seeds a splitmix64 stream here, so a
//! strategy stays a pure function of its context and its tests can name every outcome.

/// A splitmix64 stream (Steele, Lea and Flood, 2014): statistically sound for drawing
/// orders, cheap, and stateless beyond its one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (`n` > 0), by the high half of a 128-bit product (Lemire): its
    /// bias is below n / 2^64, far under anything a test or a user could see.
    pub fn below(&mut self, n: u64) -> u64 {
        let wide = u128::from(self.next_u64()) * u128::from(n);
        u64::try_from(wide >> 64).unwrap_or(0)
    }

    /// An index below `n` (`n` > 0).
    pub fn index(&mut self, n: usize) -> usize {
        let n64 = u64::try_from(n).unwrap_or(u64::MAX);
        usize::try_from(self.below(n64)).unwrap_or(0)
    }

    /// Shuffles `items` in place (Fisher–Yates): every order equally likely.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_splitmix64() {
        // The reference outputs of splitmix64 seeded with 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn draws_stay_below_their_bound_and_cover_it() {
        let mut r = Rng::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..5_000 {
            let i = r.index(5);
            seen[i] += 1;
        }
        assert!(seen.iter().all(|&c| (900..=1_100).contains(&c)), "{seen:?}");
        assert_eq!(Rng::new(1).index(1), 0);
    }

    #[test]
    fn a_shuffle_is_a_permutation_and_reproducible() {
        let mut a: Vec<usize> = (0..10).collect();
        Rng::new(42).shuffle(&mut a);
        let mut b: Vec<usize> = (0..10).collect();
        Rng::new(42).shuffle(&mut b);
        assert_eq!(a, b);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_ne!(a, (0..10).collect::<Vec<_>>());
    }
}
