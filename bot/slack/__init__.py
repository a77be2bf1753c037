"""The Slack surface: Bolt listeners, Block Kit views, progress, answers (only it imports Bolt)."""
