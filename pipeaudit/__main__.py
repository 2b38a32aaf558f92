from pipeaudit.cli.main import main

main()
