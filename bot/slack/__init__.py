"""The Slack surface: Bolt listeners, Block Kit views, progress and answers. Only this imports Bolt."""
