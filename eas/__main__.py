from eas.cli import main

main()
