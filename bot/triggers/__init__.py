"""Work that starts itself: schedules, webhooks and watched channels. They start turns
through the turn machine (bot/sessions), nothing else."""
