use super::*;

fn lock<'a>(
    name: &'a str,
    state: &'a str,
    owner: Option<(&'a NodeId, bool)>,
    eligible: usize,
) -> GroupLock<'a> {
    GroupLock {
        name,
        path: "/zkcron/x",
        state,
        owner,
        eligible_members: eligible,
    }
}

#[test]
fn a_fleet_is_healthy_only_when_every_group_has_an_owner_that_fires() {
    let (a, b) = (NodeId::new("a"), NodeId::new("b"));
    let owned = [
        lock("default", "held", Some((&a, false)), 2),
        lock("etl", "held", Some((&b, false)), 2),
    ];
    let health = judge(owned, &[&a, &b], None);
    assert!(health.healthy, "{health:?}");
    assert_eq!(health.exit_code, 0);

    for (broken, says) in [
        (
            lock("etl", "none", None, 2),
            "group etl: no owner (2 live member(s)",
        ),
        (lock("etl", "none", None, 0), "no live member may own it"),
        (
            lock("etl", "held", Some((&b, true)), 2),
            "its owner b is handing it over",
        ),
        (
            lock("etl", "squatter", None, 2),
            "squats the lock path /zkcron/x",
        ),
        (lock("etl", "held", None, 2), "not zkcron's"),
    ] {
        let groups = [lock("default", "held", Some((&a, false)), 2), broken];
        let health = judge(groups, &[&a, &b], None);
        assert!(!health.healthy);
        assert_eq!(health.exit_code, NO_OWNER, "{health:?}");
        assert!(
            health.problems.len() == 1 && health.problems[0].contains(says),
            "{health:?} must say {says:?}"
        );
    }
}

#[test]
fn a_member_is_checked_only_when_named_and_a_group_without_owner_comes_first() {
    let a = NodeId::new("a");
    let owned = [lock("default", "held", Some((&a, false)), 1)];
    assert!(judge(owned, &[&a], Some(&a)).healthy);
    let missing = judge(owned, &[&a], Some(&NodeId::new("laptop")));
    assert_eq!(missing.exit_code, NOT_A_MEMBER);
    assert_eq!(missing.problems, ["node laptop is not a live member"]);

    let both = judge([lock("default", "none", None, 0)], &[], Some(&a));
    assert_eq!(both.exit_code, NO_OWNER);
    assert_eq!(both.problems.len(), 2, "{both:?}");
    assert_eq!(unreachable("refused".into()).exit_code, UNREACHABLE);
}
