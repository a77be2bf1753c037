"""The forge: git remotes, a branch per thread, pull requests, and the forge's webhooks.

GitHub (and GitHub Enterprise) first, behind the small `Forge` interface, so that other
forges can follow. Credentials stay in Baton's process: git gets them per command,
never in a file, an argument or the sandbox.
"""
