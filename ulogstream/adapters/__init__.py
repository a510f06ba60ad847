"""The asyncio shell: the only code that awaits, sleeps or touches devices, sockets and files."""
