//! Rebuild when a migration is added: `sqlx::migrate!` embeds the
//! migrations directory, and cargo would not notice a new file on its own.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
