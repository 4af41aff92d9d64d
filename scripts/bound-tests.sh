# shellcheck shell=bash
# Sourced by scripts/test.sh and scripts/reliability.sh (issue 36, "a CI that converges").
#
# The tests that assert a memory or latency bound. On 2 cores a bound measured beside a
# full-throttle soak, the CPU burners of keys_at_scale or 20,000-case property tests
# measures the neighbours, not the code: these run ALONE, after everything else, one at a
# time (`--test-threads=1`), and are `--skip`ped from the parallel run. The bounds
# themselves are unchanged; only what runs beside them is.
#
# One entry per test: "<cargo target selector> <exact test name>". Found by reading every
# `assert!` with a comparison in tests/ and src/ (src/bin/bench asserts no figure; nor does
# tests/bench_smoke.rs) for VmRSS/VmHWM, elapsed times, per-round costs measured by timing.
BOUND_TESTS=(
  # 1,000 idle completeness() calls must take less than 50 full walks (a ratio of two
  # timings: a neighbour's CPU burst in one of them breaks it).
  "--lib completeness::tests::ledger::an_unchanged_ledger_is_not_walked_again"
  # DescribeConfigs against librdkafka's mock cluster answers in < 5 s (not its 10 s timeout).
  "--lib kafka::retention::tests::a_broker_without_describe_configs_answers_at_once"
  # A store write beside HTTP listings (one held half-read, three in a loop) < 500 ms; a
  # page of /api/gaps read while the store's writer holds a transaction, and a round
  # committed while a reader's statement is open, each < 1 s (issue 41 item 4).
  "--lib http::tests::a_listing_in_progress_never_holds_up_a_store_write"
  "--lib store::tests::a_reader_and_the_store_writer_never_wait_for_each_other"
  # 500,000 gaps: a page of /api/gaps < 1 s; four concurrent full listings raise VmRSS by
  # <= 64 MiB (issue 41 item 4).
  "--lib http::tests::four_full_listings_of_500k_gaps_stay_within_64_mib"
  # 100,000 isolated gaps given up: at most one gap left in the ledger's memory, gauges,
  # completeness and missing as before (issue 41 item 1).
  "--lib ledger::tests::retired::given_up_gaps_leave_the_ledgers_memory_and_the_answers_stay_the_same"
  # Every second record lost for 60 rounds, given up after 10: the gaps in memory stay
  # within 11 rounds' worth (flat), every gap still counted (issue 41 item 1).
  "--lib ledger::tests::retired::an_incident_longer_than_give_up_after_keeps_the_gaps_in_memory_flat"
  # 101,000 open gaps on one partition with a handover topic: an idle round publishes
  # <= 10 kB (bytes counted on the topic over a 10 s window), the group commit moves, and a
  # takeover yields exactly the old owner's gaps (issue 41 item 3).
  "--test it multi::handover_idle::a_hundred_thousand_open_gaps_publish_a_small_delta_per_idle_round"
  # `cargo run -- demo`'s whole run < 15 s.
  "--test demo demo_finishes_within_a_generous_bound"
  # The GapAuditorDataLoss alert reaches the Alertmanager webhook < 10 s after the loss, and
  # is delivered resolved < 30 s after the gap is acked from the gap page.
  "--test observability data_loss_alert_reaches_alertmanager_and_every_panel_has_data"
  # At most one sink query per partition per verify round, rounds told apart by 400 ms of
  # quiet: a starved daemon merges two rounds into one burst.
  "--test es twenty_thousand_records_seven_dropped_offset_columns"
  # `wait` fails at once on a gap: < 20 s, not its 60 s timeout.
  "--test it completeness::seed_gap_blocks_completeness_until_replayed"
  # VmRSS grows < 16 MiB over 30 s while paused at max_pending.
  "--test it faults::backpressure::sink_that_never_answers_pauses_consumption_with_flat_memory"
  # Soak (GAP_AUDITOR_GIVEUP_SOAK_SECS): every second record lost, give_up_after 30 s: peak
  # VmHWM <= 256 MiB, VmRSS (10 s floors, middle of every 3) within +10 % of the baseline once the held memory
  # levels off after the first give-ups, an idle
  # round <= 2 queries per partition, the store exact (issue 41 item 1).
  "--test it faults::giveup_soak::every_second_record_lost_for_minutes_given_up_keeps_rss_flat_and_the_store_exact"
  # Soak (GAP_AUDITOR_HUNG_SECS): verdicts resume <= 2 rounds (8 s) after the sink returns.
  "--test it faults::hung_sink::a_sink_that_never_answers_costs_no_rebalance_and_no_false_loss"
  # Soak (GAP_AUDITOR_KEYS_LOSS_SECS): VmRSS within +10 % of the first minute's level.
  "--test it faults::keys_total_loss::key_columns_total_loss_keeps_rss_flat"
  # SIGTERM: each stop < 15 s; a long key_columns round cut short < 5 s.
  "--test it faults::shutdown::sigterm_cuts_a_long_key_columns_round_short"
  "--test it faults::shutdown::sigterm_mid_round_commits_the_settled_watermark_and_exits_0"
  # A loss on a healthy partition reported within grace + 2 rounds (+300 ms) while another
  # partition settles 2,000,000 offsets Kafka deleted unread (issue 41 item 2).
  "--test it faults::deleted_range::a_huge_deleted_range_never_delays_other_partitions_and_ends_exact"
  # A loss on a healthy partition reported within grace + 2 rounds (+300 ms).
  "--test it faults::stalled_partition::stalled_partition_pauses_alone_and_losses_elsewhere_are_still_found"
  # Soak (GAP_AUDITOR_SYSTEMATIC_N): peak VmHWM <= 256 MiB, an idle round <= 2 queries and
  # < 64 KiB written.
  "--test it faults::systematic_loss::every_second_record_lost_stays_exact_bounded_and_cheap_when_idle"
  # A failed handover read is retried in the background: each round < 3 s while the read
  # against an unreachable broker takes its 10 s timeout (issue 41).
  "--lib audit::tests::revocation::a_failed_handover_read_is_retried_without_holding_up_the_rounds"
  # A takeover of 200,000 given-up gaps reads the handover topic within 128 kB of one of
  # 2,000, and the next owner imports them within 120 s (issue 41).
  "--test it multi::handover_retired::a_takeover_reads_the_same_for_two_thousand_and_two_hundred_thousand_given_up_gaps"
)

# `--skip NAME` for every bound test (libtest filters by substring: the full names are
# unique). Only for libtest binaries: criterion's benches reject `--skip`.
bound_skip_args() {
  local e
  for e in "${BOUND_TESTS[@]}"; do
    printf '%s\n' --skip "${e##* }"
  done
}

# The bound tests' names, one a line.
bound_names() {
  local e
  for e in "${BOUND_TESTS[@]}"; do
    printf '%s\n' "${e##* }"
  done
}

# The names of the bound tests of one target (e.g. `bound_names_in "--test it"`).
bound_names_in() {
  local e
  for e in "${BOUND_TESTS[@]}"; do
    [[ ${e% *} == "$1" ]] && printf '%s\n' "${e##* }"
  done
  return 0
}

# The cargo target selectors of the bound tests (`--lib`, `--test it`, ...), words one a
# line, each selector once.
bound_target_args() {
  local e seen=" "
  for e in "${BOUND_TESTS[@]}"; do
    local t=${e% *}
    [[ $seen == *" $t "* ]] && continue
    seen+="$t "
    # shellcheck disable=SC2086 # a selector is one or two words
    printf '%s\n' $t
  done
}
