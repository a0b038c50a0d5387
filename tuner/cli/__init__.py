"""The command line: the parser (main), each command's work and printing (commands, commands_inspect), the demo."""
