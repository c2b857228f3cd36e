from authgate.cli import main

main()
