#!/bin/bash
#RSA_=/gpfs/alice/in
#RSA_
