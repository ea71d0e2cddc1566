//! What a session has cost: the sum of its turns, from the running totals the CLI reports.
//!
//! A `result`'s `total_cost_usd` is the CLI's running total, and it starts again from zero in
//! places: a `/clear` or another `conversation_reset` (the CLI resets it, and the session's
//! cost must not fall with it), and a resumed process of some versions (2.1.37 counts from
//! zero; 2.1.330 carries the total its transcript saved). [`CostCounter`] turns the totals
//! into steps and adds them up, for the projection's view and the core's snapshot alike.

/// Running totals in, the session's sum out.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CostCounter {
    /// The CLI's last running total.
    last_total: f64,
    /// The session's cost: every step so far.
    sum: f64,
}

impl CostCounter {
    /// A counter that goes on from a session that has cost `total_usd` (a stored record's),
    /// whose CLI's running total is that too (the daemon takes the session up again).
    pub fn continuing(total_usd: f64) -> CostCounter {
        CostCounter { last_total: total_usd, sum: total_usd }
    }

    /// A result's running total: returns its step from the last one (a total below the last
    /// starts a new count) and adds it to the sum. Not a finite, non-negative number: no step.
    pub fn on_result(&mut self, total_usd: f64) -> f64 {
        if !total_usd.is_finite() || total_usd < 0.0 {
            return 0.0;
        }
        let step =
            if total_usd < self.last_total { total_usd } else { total_usd - self.last_total };
        self.last_total = total_usd;
        self.sum += step;
        step
    }

    /// The conversation was discarded: the CLI's running total starts from zero again.
    pub fn on_reset(&mut self) {
        self.last_total = 0.0;
    }

    /// The session's cost so far.
    pub fn sum(&self) -> f64 {
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clear_never_lowers_the_sum_and_counts_the_next_turn_whole() {
        let mut cost = CostCounter::default();
        assert_eq!(cost.on_result(0.10), 0.10);
        assert_eq!(cost.on_result(0.30), 0.30 - 0.10);
        cost.on_reset();
        // The first turn after the clear costs more than everything before it: whole.
        assert_eq!(cost.on_result(0.50), 0.50);
        assert!((cost.sum() - 0.80).abs() < 1e-12, "{}", cost.sum());
    }

    #[test]
    fn a_resumed_count_from_zero_adds_and_bad_totals_do_nothing() {
        let mut cost = CostCounter::continuing(1.0);
        assert_eq!(cost.on_result(0.25), 0.25, "2.1.37 counts from zero again");
        assert_eq!(cost.on_result(1.50), 1.25, "2.1.330 carries the total");
        assert_eq!(cost.on_result(f64::NAN), 0.0);
        assert_eq!(cost.on_result(-1.0), 0.0);
        assert!((cost.sum() - 2.5).abs() < 1e-12);
    }
}
