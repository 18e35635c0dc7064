"""What a placement run hands back: the report, the Chrome trace and plot, the saved
placement, the progress channel, and files written whole or not at all."""
