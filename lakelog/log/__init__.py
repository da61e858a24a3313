"""The transaction log: actions, commit files, manifests and snapshots."""
