//! The `mask_keys` row: the key file against the check values this database recorded.

use super::{finding, Finding, Status};
use crate::mask::KeyChecks;

/// What `src/mask.rs` found: no key file, a key file it refuses (why), or the file's keys (the
/// current one and how they stand against the records).
pub enum KeyFileState {
    Missing,
    Refused(String),
    Read {
        current: u8,
        keys: usize,
        checks: KeyChecks,
    },
}

fn ids(ids: &[u8]) -> String {
    ids.iter().map(u8::to_string).collect::<Vec<_>>().join(", ")
}

/// `recorded`: how many key ids this database has check values for.
pub fn mask_keys(state: &KeyFileState, recorded: usize) -> Finding {
    let check = "mask_keys";
    match state {
        KeyFileState::Missing if recorded == 0 => {
            finding(check, Status::Skipped, "no key file pg_shard_id.keys: masking is not used here")
        }
        KeyFileState::Missing => finding(
            check,
            Status::Failed,
            format!(
                "this database recorded check values for {recorded} mask key(s), but this server \
                 has no key file pg_shard_id.keys: masked values can be neither made nor read. \
                 Fix: put the key file they were made with in the data directory (chmod 600)."
            ),
        ),
        KeyFileState::Refused(why) => finding(check, Status::Failed, why.clone()),
        KeyFileState::Read { checks, .. } if !checks.mismatched.is_empty() => finding(
            check,
            Status::Failed,
            format!(
                "key id(s) {} of pg_shard_id.keys are not the keys this database recorded for \
                 them: masking with them is refused (values made with them, in generated columns \
                 and indexes, would change). Fix: put back the keys this database's values were \
                 made with; a new key takes a new id.",
                ids(&checks.mismatched)
            ),
        ),
        KeyFileState::Read { checks, .. } if !checks.unrecorded.is_empty() => finding(
            check,
            Status::Warning,
            format!(
                "key id(s) {} of pg_shard_id.keys have no check value recorded in this database, \
                 so a different key under the same id (a restored copy, a standby given another \
                 file) would go unnoticed. Fix: SELECT * FROM shard_id_mask_keys_record(); (superuser).",
                ids(&checks.unrecorded)
            ),
        ),
        KeyFileState::Read { current, keys, .. } => finding(
            check,
            Status::Ok,
            format!(
                "{keys} key(s) in pg_shard_id.keys (current: {current}), each the key this database \
                 recorded for its id"
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(mismatched: Vec<u8>, unrecorded: Vec<u8>) -> KeyFileState {
        KeyFileState::Read {
            current: 2,
            keys: 3,
            checks: KeyChecks {
                mismatched,
                unrecorded,
            },
        }
    }

    #[test]
    fn each_state_has_its_status_and_names_the_ids() {
        assert_eq!(mask_keys(&KeyFileState::Missing, 0).status, Status::Skipped);
        assert_eq!(mask_keys(&KeyFileState::Missing, 2).status, Status::Failed);
        let refused = mask_keys(&KeyFileState::Refused("it is a symbolic link".into()), 0);
        assert_eq!(
            (refused.status, refused.detail.as_str()),
            (Status::Failed, "it is a symbolic link")
        );
        let mismatch = mask_keys(&read(vec![2], vec![3]), 2);
        assert_eq!(mismatch.status, Status::Failed);
        assert!(
            mismatch.detail.starts_with("key id(s) 2 of"),
            "{}",
            mismatch.detail
        );
        let unrecorded = mask_keys(&read(vec![], vec![1, 3]), 1);
        assert_eq!(unrecorded.status, Status::Warning);
        assert!(
            unrecorded.detail.starts_with("key id(s) 1, 3 "),
            "{}",
            unrecorded.detail
        );
        assert!(unrecorded.detail.contains("shard_id_mask_keys_record()"));
        assert_eq!(mask_keys(&read(vec![], vec![]), 3).status, Status::Ok);
    }
}
