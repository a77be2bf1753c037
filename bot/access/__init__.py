"""Who may start runs, who may decide, which workspace a channel gets, and how much
it may spend: decided here, without the UI (the Slack surface asks and renders).
"""
