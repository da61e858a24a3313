"""Cleanup: make old versions unreadable and delete the files nothing references any more.

* :mod:`.expire`: expire versions, then delete the data and log files only they used;
* :mod:`.vacuum`: delete files under the root that no retained version references;
* :mod:`.logscan`: read many commits fast, keeping only paths and sizes;
* :mod:`.report`: what each of them deleted, or would delete in a dry run.

Neither rewrites data, so neither uses the rewrite pipeline of
:mod:`lakelog.maintenance`; both write the log only through the handle's
``commit`` (:class:`~lakelog.core.TableHandle`).
"""
