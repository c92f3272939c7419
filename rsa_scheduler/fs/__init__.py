"""The RAMDISK filesystem backends: the interface and what a backend can do (:mod:`.base`),
discovery through entry points (:mod:`.registry`), the shipped backends (:mod:`.tmpfs`,
:mod:`.moosefs`, :mod:`.beeond`) and their helpers. Never imports the configuration."""
