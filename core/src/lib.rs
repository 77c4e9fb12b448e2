//! The parts of pg_shard_id that do not need PostgreSQL: the 64-bit id layout, time conversion,
//! the uniqueness guard and its lease, shard routing, shortcodes and masked ids. The `pg_shard_id` extension
//! crate is a thin pgrx layer on top.
//!
//! Everything here is tested with ordinary `cargo test`, without a database.

pub mod backfill;
pub mod catalog_watch;
pub mod guard;
pub mod hash;
pub mod health;
pub mod json;
pub mod layout;
pub mod lease;
pub mod mask;
pub mod newest_first;
pub mod node_tree;
pub mod open_draws;
pub mod origin;
pub mod privilege_cache;
pub mod routing;
pub mod shortcode;
pub mod slot_cache;
pub mod slots;
pub mod time;

/// At most `max_chars` characters of `text`, with "..." after a cut: error messages echo user
/// input, and a 1 MB input must not make a 1 MB message.
pub fn echo(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn echo_cuts_long_input_on_a_character_boundary() {
        assert_eq!(super::echo("short", 10), "short");
        assert_eq!(super::echo(&"x".repeat(1_000_000), 5), "xxxxx...");
        assert_eq!(super::echo("ééééé", 3), "ééé...");
    }
}
