//! Parameter parsing.

use weft_server::params::{go_duration, rfc3339};

#[test]
fn durations() {
    assert_eq!(go_duration("d", "1.5s").unwrap(), 1_500_000_000);
    assert_eq!(go_duration("d", "1h2m").unwrap(), 3_720_000_000_000);
    assert_eq!(go_duration("d", "250us").unwrap(), 250_000);
    assert_eq!(go_duration("d", "0").unwrap(), 0);
    assert!(go_duration("d", "5").is_err());
    assert!(go_duration("d", "-1s").is_err());
    assert!(go_duration("d", "1x").unwrap_err().0.contains("parameter d"));
}

#[test]
fn times() {
    assert_eq!(rfc3339("t", "1970-01-01T00:00:01Z").unwrap(), 1_000_000_000);
    assert_eq!(rfc3339("t", "2024-02-29T12:00:00.5+01:00").unwrap(), 1_709_204_400_500_000_000);
    // `+01:00` sent unencoded in a query string arrives as ` 01:00`.
    assert_eq!(rfc3339("t", "2024-02-29T12:00:00.5 01:00").unwrap(), 1_709_204_400_500_000_000);
    assert_eq!(rfc3339("t", "2024-02-29T11:00:00.000000001Z").unwrap(), 1_709_204_400_000_000_001);
    for bad in [
        "",
        "2024-02-29",
        "2024-13-01T00:00:00Z",
        "2024-02-29T11:00:00",
        "2024-02-29T11:00:00.Z",
        "x024-02-29T11:00:00Z",
    ] {
        assert!(rfc3339("t", bad).is_err(), "{bad}");
    }
}

proptest::proptest! {
    #[test]
    fn parsers_never_panic(s in ".{0,40}") {
        let _ = go_duration("d", &s);
        let _ = rfc3339("t", &s);
    }
}
