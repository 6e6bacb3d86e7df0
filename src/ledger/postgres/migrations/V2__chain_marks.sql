-- The chain marks a submitted parent's end leaves in ZooKeeper for the jobs that run after it,
-- written by the statement that ends the run and deleted once they are made there: an owner
-- killed between the two leaves them here, and the next owner's chores make them. ZooKeeper
-- keeps the marks themselves (the children's owners watch them); a row lives seconds.
CREATE TABLE zkcron_marks (
    lock_group text NOT NULL,
    path text NOT NULL,
    mark bytea NOT NULL,
    ended_ms bigint NOT NULL,
    PRIMARY KEY (lock_group, path)
);
CREATE INDEX zkcron_marks_ended ON zkcron_marks (lock_group, ended_ms);
