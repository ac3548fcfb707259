//! The engine's arithmetic agrees with PostgreSQL's, digit for digit, so an
//! auditor's SQL reproduces every amount.

use hpc_ledger::domain::units::{QUANTITY_SCALE, div_round, round_money};
use rust_decimal::Decimal;

use crate::harness::TestDb;

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn decimal(&mut self, max_scale: u32) -> Decimal {
        let scale = (self.next() % u64::from(max_scale + 1)) as u32;
        let mantissa = (self.next() % 10_000_000_000_000) as i64 - 5_000_000_000_000;
        Decimal::new(mantissa, scale)
    }
}

#[tokio::test]
async fn rounding_to_cents_matches_postgres_round() {
    let db = TestDb::new().await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut xs: Vec<Decimal> = (0..5000).map(|_| rng.decimal(12)).collect();
    // Exact half cents, both signs: the cases where rounding modes differ.
    for i in 0..200i64 {
        xs.push(Decimal::new(i * 10 + 5, 3));
        xs.push(Decimal::new(-(i * 10 + 5), 3));
    }
    let theirs: Vec<Decimal> =
        sqlx::query_scalar("SELECT round(x, 2) FROM unnest($1::numeric[]) WITH ORDINALITY u(x, i) ORDER BY i")
            .bind(&xs)
            .fetch_all(&db.pool)
            .await
            .unwrap();
    let ours: Vec<Decimal> = xs.iter().copied().map(round_money).collect();
    assert_eq!(ours, theirs);
    assert_eq!(round_money("0.125".parse().unwrap()).to_string(), "0.13");
    assert_eq!(round_money("-0.125".parse().unwrap()).to_string(), "-0.13");
}

#[tokio::test]
async fn exact_division_matches_the_sql_function() {
    let db = TestDb::new().await;
    let mut rng = Rng(42);
    let mut ns = Vec::new();
    let mut ds = Vec::new();
    for _ in 0..5000 {
        ns.push(rng.decimal(12));
        let mut d = rng.decimal(4);
        if d.is_zero() {
            d = Decimal::ONE;
        }
        ds.push(d);
    }
    // The divisions the engine makes: memory / memory per core, core-seconds / 3600.
    for (mem, mpc) in [
        (12u64 << 30, 4u64 << 30),
        (1993 << 20, 4 << 30),
        (10 << 30, 3 << 30),
        (7, 3600),
    ] {
        ns.push(Decimal::from(mem));
        ds.push(Decimal::from(mpc));
    }
    let theirs: Vec<Decimal> = sqlx::query_scalar(
        "SELECT hl_div_round(n, d, $3) FROM unnest($1::numeric[], $2::numeric[]) WITH ORDINALITY u(n, d, i) ORDER BY i",
    )
    .bind(&ns)
    .bind(&ds)
    .bind(QUANTITY_SCALE as i32)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for ((n, d), t) in ns.iter().zip(&ds).zip(&theirs) {
        assert_eq!(div_round(*n, *d, QUANTITY_SCALE), Some(*t), "{n} / {d}");
    }
}
