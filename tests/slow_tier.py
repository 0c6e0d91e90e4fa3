"""The slow tier: what `pytest -m "not slow"` (the fast tier a contributor runs after every change) leaves out.
CI and scripts/test.sh run both tiers; the slow tier is where a test goes, never a reason to delete one.

A test is slow when one run of it costs 0.3 s of CPU or more here (user+sys, with the processes it waits for,
its module's fixtures counted in the first test that asks for them), or its cases together cost 1 s:

- worker pools, Dask clusters, races between processes, signals and subprocesses of the CLI (each child
  interpreter pays ~1 s of imports);
- stores ingested from real profiler exports, and whole-export parses repeated per case;
- hypothesis campaigns (tests/fuzzing.fuzz marks its own), PostgreSQL and Chromium (marked where they stand).

Measure with tests/cpu_time.py (`pytest -m "not slow" -p cpu_time`: the tests that cost the most CPU, after the
summary) and move a test here by name; tests/test_layout.py checks that every name still names a test.
Module fixtures shared by fast and slow tests are paid by the fast tier: keep them cheap or make the module slow.
"""

from __future__ import annotations

# Every test of these modules.
SLOW_MODULES = frozenset({
    "test_compare_warnings.py", "test_cuda_graphs.py", "test_dashboard_drilldown.py", "test_dashboard_server.py",
    "test_decomposition.py", "test_kineto_attribution.py", "test_list.py", "test_nsys_job.py", "test_nsys_stream.py",
    "test_raw_events.py", "test_require_realdata.py", "test_summaries.py", "test_workflows.py",
})

# These tests of these modules (a parametrized test by its function name: all its cases).
SLOW_TESTS: dict[str, tuple[str, ...]] = {
    "test_anatomy_across_ranks.py": (
        "test_past_one_nodes_ranks_the_default_is_one_table_per_phase",
        "test_the_dashboard_draws_the_spread_past_one_nodes_ranks",
    ),
    "test_anatomy_kernels.py": (
        "test_stored_totals_cover_the_steady_steps_and_print",
    ),
    "test_attach_machine.py": (
        "test_a_file_contradicting_an_earlier_attachment_is_refused_naming_both_sides",
        "test_a_profile_whose_steps_are_not_the_logs_is_refused",
        "test_an_attached_export_gives_a_log_that_knows_no_machine_its_machine",
        "test_step_times_far_from_the_logs_are_a_mismatch",
        "test_the_first_file_to_state_the_machine_is_the_side_a_later_one_is_held_to",
        "test_the_profiler_a_run_ran_under_is_runtime_drift",
    ),
    "test_capture.py": (
        "test_recorder_reads_rank_from_env_and_writes_to_a_stream",
        "test_recorder_without_cuda_labels_host_timing_and_no_gpu",
        "test_recorder_without_footer_reads_as_ended_early",
        "test_two_ranks_append_one_file_without_interleaving",
    ),
    "test_check.py": (
        "test_real_sub_floor_slowdowns_are_never_faster_and_pass",
        "test_a_candidate_that_carries_the_tag_is_not_its_own_baseline",
        "test_a_rumor_has_no_lane_and_exits_3",
        "test_a_slower_run_wins_over_a_missing_baseline_in_the_exit_code",
        "test_errors_exit_2_in_one_line",
        "test_junit_github_and_a_hostile_run_name_in_the_comment",
        "test_one_outlier_baseline_run_is_excluded_and_named",
        "test_real_every_aa_run_passes_against_the_other_main_runs",
        "test_real_planted_slowdowns_are_slower_against_main",
        "test_the_baseline_is_the_most_recent_n_of_the_tag_in_the_candidates_lane",
    ),
    "test_compressed_logs.py": (
        "test_a_compressed_log_is_its_text",
    ),
    "test_correlation.py": (
        "test_lookup_equals_the_plain_reference",
    ),
    "test_dashboard_apptest.py": (
        "test_a_profile_read_from_a_folder_lists_its_files_and_how_to_open_them_together",
        "test_a_stale_link_says_so_instead_of_showing_another_run",
        "test_anatomy_view_draws_categories_ranks_phases_and_nvtx",
        "test_anatomy_view_says_where_the_export_is_and_how_to_open_it",
        "test_compare_b_picker_offers_a_lane_only",
        "test_compare_overlay_aligns_both_runs_by_steady_position",
        "test_compare_view_comparable_pair_shows_ratio_anatomy_and_drift",
        "test_compare_view_refusal_is_the_page",
        "test_compare_view_refuses_a_rumor",
        "test_compare_with_itself_is_said",
        "test_lane_filters_live_in_the_url",
        "test_lane_history_view_marks_the_change_point_of_the_real_h100_runs",
        "test_lane_history_view_shows_noise_floor_and_change_points",
        "test_lanes_and_history_date_a_log_by_its_own_timestamps",
        "test_lanes_filters_and_search_go_through_sql_params",
        "test_lanes_view_groups_by_identity_and_marks_rumors",
        "test_mlperf_receipt_has_time_to_train_as_its_headline",
        "test_nccl_tests_bus_bandwidth_attached_to_a_receipt_is_shown",
        "test_receipt_view_charts_the_training_metrics_the_log_printed",
        "test_receipt_view_of_a_real_log_shows_window_and_peak_gap",
        "test_receipt_view_shows_identity_env_topology_steps_and_memory_drift",
        "test_sidebar_switches_views",
        "test_stragglers_view_names_the_export_the_report_came_from",
        "test_stragglers_view_names_the_planted_rank",
        "test_topology_with_nics_shows_gpus_only_by_default",
    ),
    "test_dashboard_views.py": (
        "test_a_link_to_a_superseded_receipt_names_the_receipt_that_replaced_it",
        "test_an_mlperf_result_without_a_series_reads_without_none",
        "test_compare_view_explains_why_b_differs_with_noise_bands",
        "test_the_anatomy_per_step_chart_is_scaled_to_the_steady_steps",
        "test_the_report_beside_an_export_is_named_for_nsys_ui",
    ),
    "test_drilldown.py": (
        "test_a_steps_rows_keep_its_longest_kernels_and_sum_the_rest",
        "test_an_export_attached_before_schema_12_says_to_attach_it_again",
        "test_an_export_without_step_markers_has_no_step_to_open",
        "test_cli_opens_a_step_at_80_columns_and_as_data",
        "test_cli_refuses_a_step_or_rank_that_is_not_there_in_one_line",
        "test_per_step_kernels_sum_to_nsys_stats_for_kernels_run_only_inside_steps",
        "test_the_planted_gemm_step_names_one_kernel_with_48_more_calls",
        "test_the_planted_stall_step_is_idle_with_no_kernel_changed",
        "test_the_slowest_steady_steps_are_the_planted_ones_and_open_by_default",
        "test_typical_is_the_median_of_the_other_steady_steps",
    ),
    "test_explain.py": (
        "test_a_log_only_receipt_gets_one_line_saying_which_profile_to_attach",
        "test_benjamini_hochberg_agrees_with_scipy",
        "test_db_upgrade_recomputes_components_with_the_same_numbers",
        "test_false_alarms_per_component_stay_at_the_nominal_level",
    ),
    "test_export.py": (
        "test_bmf_is_one_benchmark_per_lane_from_its_newest_run",
        "test_exposed_communication_comes_from_the_attached_export",
        "test_pytorch_v3_records_carry_every_run_of_the_lane_and_tag",
    ),
    "test_fuzz_profiles.py": (
        "test_a_config_json_beside_rank_traces_is_not_a_rank",
        "test_a_damaged_rank_file_refuses_the_whole_profile",
        "test_a_kineto_trace_starting_with_a_utf8_bom_reads_as_without_it",
    ),
    "test_gate.py": (
        "test_a_named_pipe_as_claims_file_is_refused_without_blocking",
        "test_drift_must_be_declared_and_recipe_drift_never_passes",
        "test_real_identity_rumor_and_unknown",
        "test_real_modded_nanogpt_headline_speedup_is_not_supported_by_the_receipts",
        "test_real_sft_halves_true_claim_accepted_false_claims_rejected",
        "test_real_tag_baseline_claims_on_the_h100_noise_runs",
        "test_runs_that_ended_early_are_rejected_unless_the_claim_allows_them",
        "test_tag_baseline_rejections_and_an_outlier_left_out",
        "test_too_few_steps_noise_and_warmup_in_window",
    ),
    "test_gpu_counts.py": (
        "test_rank0_trace_of_a_16_rank_job",
    ),
    "test_history.py": (
        "test_history_puts_the_change_point_at_the_first_slowed_run",
        "test_history_uses_ingest_time_without_a_start_and_skips_superseded",
        "test_the_t_test_is_scipys_pooled_t_test",
    ),
    "test_identity_lifecycle.py": (
        "test_a_growing_log_supersedes_its_prefix",
        "test_a_header_run_id_names_the_run",
        "test_a_receipt_header_with_the_same_run_key_supersedes",
        "test_a_retagged_partial_log_keeps_its_identity_when_it_grows",
        "test_a_rumor_retagged_to_complete_then_compares",
        "test_an_export_or_facts_of_another_machine_are_refused_unless_forced",
        "test_lanes_and_lane_history_leave_superseded_receipts_out",
        "test_one_run_name_for_several_files_or_a_taken_one_needs_a_tag",
        "test_push_carries_identity_history_and_superseding",
        "test_reingest_with_other_flags_reports_the_conflict_and_the_retag_command",
        "test_retag_of_the_preset_swaps_its_feature_bundle_and_keeps_the_logs_own",
        "test_retag_refuses_without_why_or_change",
        "test_retag_to_a_run_name_in_use_is_allowed_and_says_so",
        "test_retags_made_after_a_push_travel_on_the_next_one_unless_the_target_was_retagged_too",
        "test_schema_3_upgrade_from_v2_on_duckdb",
        "test_the_export_of_the_same_run_attaches_without_force",
        "test_the_incomplete_warning_describes_the_stored_receipt",
        "test_typos_get_a_did_you_mean_and_strict_refuses_them",
    ),
    "test_ingest_hygiene.py": (
        "test_a_crashed_run_is_flagged_by_show_and_compare",
        "test_a_damaged_sqlite_gz_names_the_users_file_not_the_temporary_copy",
        "test_a_fifo_is_refused_up_front_and_never_hangs",
        "test_a_folder_ingests_each_log_and_run_directory_and_recursive_descends",
        "test_a_folder_of_traces_is_still_one_profile",
        "test_a_reader_that_goes_away_is_exit_141_not_the_gates_1",
        "test_ctrl_c_stops_the_batch_with_a_summary_and_what_was_reported_is_stored",
        "test_markup_in_run_names_and_attach_refs_is_printed_as_text",
        "test_read_commands_leave_an_existing_store_byte_for_byte",
        "test_real_log_folder_ingests_the_logs_and_names_each_file_it_cannot_read",
        "test_run_directory_with_traces_beside_run_log_ingests_with_the_same_anatomy",
        "test_the_dashboard_warns_about_a_crashed_run_on_receipt_and_compare",
    ),
    "test_ingest_progress.py": (
        "test_an_nsys_export_moves_the_bar_as_its_tables_stream",
    ),
    "test_intervals_sorted.py": (
        "test_anatomy_rows_clipped_to_spans",
        "test_intervals_that_end_before_they_start",
        "test_proper_intervals",
        "test_time_ranges_too_wide_to_lift",
    ),
    "test_kernel_corpus.py": (
        "test_every_corpus_kernel_name_has_its_reviewed_category",
    ),
    "test_kineto.py": (
        "test_agrees_with_hta",
        "test_compact_layout_with_nested_separators_is_healed",
        "test_two_rank_folder_and_time_bases",
    ),
    "test_kineto_trace.py": (
        "test_a_block_of_unexpected_types_keeps_what_the_reference_keeps",
        "test_a_damaged_time_is_named_by_both_paths",
        "test_a_time_of_another_type_is_named_as_the_reference_names_it",
        "test_classify_many_answers_as_classify_does",
        "test_cuts_that_fall_inside_events_move_back_to_the_separator_before",
        "test_fast_reader_keeps_what_the_reference_keeps_our_captures",
        "test_fast_reader_keeps_what_the_reference_keeps_realdata",
        "test_ids_that_are_not_int64_are_unknown_on_both_paths",
    ),
    "test_lean_imports.py": (
        "test_compare_and_explain_leave_yaml_and_pydantic_out",
        "test_compare_without_profiles_imports_no_frame_or_statistics_library",
        "test_a_value_typer_would_check_is_checked_as_typer_checks_it",
        "test_show_imports_no_frame_statistics_yaml_or_pydantic",
        "test_ingest_show_and_list_run_without_pandas_or_pyarrow",
        "test_list_json_loads_neither_polars_nor_numpy",
        "test_once_pandas_is_imported_it_stays",
    ),
    "test_log_stream.py": (
        "test_a_long_ingest_on_a_terminal_shows_the_file_bytes_and_lines",
        "test_chunks_are_the_lines_of_the_whole_read",
        "test_streamed_parsers_match_the_whole_read",
    ),
    "test_megatron_rows.py": (
        "test_a_cut_log_keeps_the_whole_lines_before_the_cut",
        "test_a_mutated_real_log_parses_to_stable_rows",
        "test_any_iteration_lines_parse_to_stable_rows",
        "test_each_edge_line_alone_and_cut_is_stable",
        "test_line_ends_do_not_change_the_rows",
        "test_the_megatron_deepspeed_log_reads_to_its_awk_counts",
    ),
    "test_memory_geometry.py": (
        "test_attach_names_what_a_file_it_cannot_take_is",
        "test_a_snapshot_needs_attach_and_attaches_once",
        "test_compare_json_memory_drift_names_the_bucket_that_moved",
        "test_dashboard_memory_view",
        "test_estimate_equals_measured_shards_exactly_and_reports_activation_error",
        "test_full_recompute_estimate_beside_the_checkpointed_run",
        "test_gate_accepts_and_rejects_bucket_claims",
        "test_push_carries_the_geometry",
        "test_show_json_memory_geometry",
        "test_show_text_has_the_geometry_table_and_the_three_gaps",
    ),
    "test_memory_runs.py": (
        "test_snapshot_replayed_peak_equals_max_memory_allocated",
    ),
    "test_mlperf.py": (
        "test_sysjson_gives_the_system_and_results_are_not_recipe",
        "test_time_to_train_is_the_headline_in_show_and_list",
    ),
    "test_nsys.py": (
        "test_a_report_in_a_read_only_folder_is_exported_to_scratch_and_the_copy_removed",
        "test_an_activity_ending_before_it_starts_counts_zero_and_a_time_far_out_is_named",
        "test_custom_step_pattern_and_bad_pattern",
        "test_env_evidence_is_redacted",
        "test_fsdp2_kernel_and_nvtx_totals_equal_nsys_stats",
        "test_mfu_two_gpus_nccl_and_nvtx_totals",
        "test_steps_attributed_from_any_thread",
    ),
    "test_nsys_edges.py": (
        "test_nvtx_ranges_with_damaged_times_are_stored",
        "test_the_gpu_table_is_read_by_column_name_in_every_layout",
        "test_the_kernels_of_a_capture_without_step_markers_are_listed",
        "test_without_step_markers_every_kernel_is_summed_by_name_in_the_window",
        "test_without_the_gpu_table_the_cuda_device_table_counts_the_gpus_and_the_model_is_unknown",
    ),
    "test_nsys_expected.py": (
        "test_a_spilled_parse_gives_the_pinned_numbers",
        "test_a_window_without_steps_read_in_bins_of_time_equals_it_read_whole",
        "test_chunked_interval_arithmetic_gives_the_same_numbers",
        "test_parse_equals_the_previous_implementation",
    ),
    "test_nsys_window.py": (
        "test_bins_add_up_to_the_window",
    ),
    "test_output_conventions.py": (
        "test_a_kernel_name_takes_a_line_or_two_on_a_terminal_and_stays_whole_in_tsv",
        "test_an_error_under_json_is_a_json_object_on_stdout",
        "test_colour_follows_no_color_and_clicolor_force",
        "test_every_reading_command_takes_every_format",
        "test_help_shows_no_type_placeholders",
        "test_list_in_a_pipe_is_tsv_with_full_ids_and_rfc3339_times",
        "test_reports_read_at_80_columns_in_a_pipe_and_errors_stay_one_line",
        "test_shell_completion_answers_commands_and_options",
        "test_the_terminal_table_fits_80_columns_without_cutting_ids_or_names",
    ),
    "test_packaging.py": (
        "test_a_command_loads_only_its_own_module",
        "test_the_cli_runs_without_the_click_package",
    ),
    "test_profile_windows.py": (
        "test_a_last_step_without_gpu_work_is_never_steady",
    ),
    "test_push.py": (
        "test_a_duckdb_target_takes_a_batch_in_one_transaction_and_each_content_once",
        "test_a_push_into_a_first_release_store_lands_every_value_in_its_column",
        "test_a_receipt_retagged_here_only_is_not_said_to_be_retagged_both_sides",
        "test_any_batching_copies_the_same_rows",
        "test_pushing_again_copies_nothing_and_reads_the_source_in_a_few_queries",
        "test_the_push_command_copies_and_says_so",
        "test_the_push_counts_the_exports_its_receipts_carry",
    ),
    "test_ranks_parallel.py": (
        "test_a_bad_trace_in_a_worker_is_one_input_error_naming_it",
        "test_an_existing_dask_cluster_reads_the_ranks",
        "test_cli_workers_store_the_same_receipt_and_anatomy",
        "test_dask_local_cluster_gives_the_serial_anatomy",
        "test_same_rank_twice_is_refused_in_workers",
        "test_the_map_says_its_progress_file_by_file",
        "test_the_reduce_keeps_what_needs_every_rank",
        "test_worker_processes_give_the_serial_anatomy",
        "test_workers_stage_raw_events_as_parquet_and_send_back_a_scan",
    ),
    "test_run_dates.py": (
        "test_a_log_without_timestamps_keeps_no_run_date_and_mid_line_dates_do_not_count",
        "test_a_profiler_trace_alone_is_dated_by_its_epoch_clock",
        "test_a_trace_without_an_epoch_clock_has_no_run_date",
        "test_an_nsys_export_alone_is_dated_by_its_session_start",
        "test_lane_history_orders_logs_by_their_own_dates_not_by_ingest_order",
    ),
    "test_run_order.py": (
        "test_a_batch_of_logs_without_dates_keeps_its_order_and_history_finds_the_planted_change",
        "test_the_dashboard_history_spaces_runs_ingested_within_a_second",
    ),
    "test_run_wrapper.py": (
        "test_a_file_the_os_cannot_execute_exits_126_and_is_not_ingested",
        "test_a_signal_nobody_listens_for_still_reaches_the_child",
        "test_a_store_locked_too_long_is_reported_and_the_exit_code_stays_the_childs",
        "test_command_that_is_not_executable_exits_126",
        "test_db_status_waits_for_the_store_lock_too",
        "test_ingest_failure_after_a_successful_run_keeps_the_childs_exit_code",
        "test_missing_command_exits_127_with_one_line_and_writes_nothing",
        "test_planted_secrets_never_reach_the_log_or_the_store",
        "test_signals_are_forwarded_to_the_child",
        "test_sigusr1_reaches_a_child_that_traps_it",
        "test_two_concurrent_runs_on_one_duckdb_store_both_land_with_their_exit_codes",
        "test_two_launches_in_one_millisecond_on_one_host_stay_two_runs",
        "test_two_ranks_sharing_the_childs_stdout_pipe",
        "test_usr1_reaches_the_worker_under_an_agent_that_does_not_handle_it",
        "test_wrapper_around_an_unmodified_script_printing_real_nanochat_lines",
    ),
    "test_scratch.py": (
        "test_a_terminated_ingest_stops_as_ctrl_c_does",
        "test_the_next_ingest_removes_what_a_killed_one_left",
    ),
    "test_secrets.py": (
        "test_nsys_captured_environment_redacts_every_form",
        "test_receipts_run_redacts_every_form_in_env_command_and_output",
    ),
    "test_sql_diff.py": (
        "test_lane_runs_and_filter_options_over_real_logs",
        "test_the_medians_read_from_steps_are_the_stored_ones",
    ),
    "test_stats.py": (
        "test_a_long_run_interval_is_computed_on_a_window_not_on_millions_of_counts",
        "test_exact_interval_matches_brute_force_block_resampling",
        "test_independent_resampling_would_undercover_autocorrelated_steps",
        "test_interval_covers_the_true_median_with_autocorrelated_steps",
        "test_ratio_interval_covers_the_true_ratio_with_between_run_variance",
        "test_settling_looks_only_at_slow_steps_and_finds_the_same_start",
        "test_the_in_place_tail_changes_no_bit",
        "test_the_support_window_finds_the_ends_the_block_length_window_finds",
    ),
    "test_store_and_compare.py": (
        "test_aliases_of_one_preset_are_comparable",
        "test_bad_inputs_give_one_message_and_leave_the_store_unchanged",
        "test_different_host_lineage_is_refused",
        "test_drift_is_sorted",
        "test_list_table_shows_the_newest_and_says_how_many_are_left_out",
        "test_missing_regime_is_refused_as_a_rumor",
        "test_preset_sharing_a_word_is_refused",
    ),
    "test_stragglers.py": (
        "test_compare_says_whether_a_straggler_explains_the_difference",
        "test_history_carries_the_straggler",
        "test_last_arrivals_agree_with_an_independent_matching",
        "test_nsys_and_kineto_captures_of_the_plant_agree",
        "test_planted_straggler_is_named_with_its_impact",
        "test_single_rank_run_has_no_straggler_report",
        "test_the_clean_run_profiled_for_12_steps_names_nobody",
        "test_the_fsdp2_runs_in_tests_data_match_their_independent_reference",
        "test_the_planted_rank_is_named_whichever_rank_it_is",
        "test_the_reports_of_many_receipts_in_one_query_are_each_ones_own",
        "test_unaligned_clocks_are_said_not_blamed",
    ),
    "test_supersession.py": (
        "test_an_earlier_view_ingested_after_the_longer_log_is_stored_superseded",
        "test_without_the_longer_log_on_this_machine_its_stored_steps_decide",
    ),
    "test_sysinfo_ingest.py": (
        "test_topology_collect_env_and_nccl_tests_attach_to_a_run",
    ),
    "test_verdicts.py": (
        "test_aa_pairs_false_alarm_rate_is_at_most_5_percent",
        "test_baseline_group_against_fresh_aa_candidates_rarely_alarms",
        "test_power_on_a_planted_3_percent_slowdown",
        "test_real_aa_pairs_are_not_called_faster_or_slower",
    ),
    "test_docs.py": (
        "test_the_cli_reference_is_generated_from_the_commands_help",
    ),
    "test_memory_drift.py": (
        "test_snapshot_categories_are_mapped_onto_the_estimates_buckets",
    ),
}


def is_slow(module: str, test: str) -> bool:
    """Whether the test function `test` of the module file `module` (e.g. "test_push.py") is in the slow tier."""
    return module in SLOW_MODULES or test in SLOW_TESTS.get(module, ())
